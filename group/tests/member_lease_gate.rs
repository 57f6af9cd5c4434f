//! The lease gates delivery, not just enqueueing (review M4, T11): a
//! record a cut-off member enqueued while its lease held, whose batch is
//! still being retried when the lease ends, never reaches the broker, so
//! the new owner's records are the only ones after the handover.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, SeekTo};
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::{ClientError, Cluster};
use weir_group::member::GroupMember;
use weir_testkit::{ClientSelector, PartitionTarget};

async fn out_client(tk: &std::sync::Arc<weir_testkit::Cluster>, id: &str) -> Cluster {
    let config = weir_integration::testkit_dial::client_config(tk, id)
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    Cluster::connect(config).await.unwrap()
}

/// Every value of `partition`, from the start to the high watermark.
async fn log_of(tk: &std::sync::Arc<weir_testkit::Cluster>, partition: i32) -> Vec<String> {
    let (_, _, hwm) = tk.offsets(TOPIC, partition).await.unwrap();
    let mut consumer = Consumer::with_cluster(
        out_client(tk, "reader").await,
        ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let tp = weir_client::consumer::TopicPartition::new(TOPIC, partition);
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

#[tokio::test(start_paused = true)]
async fn a_cut_off_members_retried_batch_never_lands_after_its_lease_ended() {
    let tk = testkit(2).await;
    let journal = Journal::default();
    let a_member = GroupMember::start(client(&tk.bootstrap(), "a").await, config("g")).unwrap();
    let a_lease = a_member.lease();
    let a = App::run(a_member, "a", &journal);
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["a", "b"], 2).await;
    let tp = journal.owners()["a"].iter().next().cloned().unwrap();
    assert!(a_lease.is_valid());

    let a_out =
        Producer::with_cluster(out_client(&tk, "a-out").await, ProducerOptions::default()).unwrap();
    // a's output path works while nothing is wrong.
    let gate = a_lease.gate();
    a_out
        .send(
            ProducerRecord::new(TOPIC)
                .with_partition(tp.partition)
                .with_value("a-before")
                .with_gate(gate.clone()),
        )
        .await
        .unwrap();

    // The outage: a loses its coordinator, and its producer the leader.
    tk.partition_client(
        ClientSelector::ClientId("a".into()),
        PartitionTarget::GroupCoordinator("g".into()),
    )
    .await
    .unwrap();
    let produce_cut = tk
        .partition_client(
            ClientSelector::ClientId("a-out".into()),
            PartitionTarget::Broker(0),
        )
        .await
        .unwrap();
    // Admitted while the lease holds; its batch is sent, unanswered,
    // retried after each request timeout.
    assert!(a_lease.is_valid());
    let late = a_out
        .enqueue(
            ProducerRecord::new(TOPIC)
                .with_partition(tp.partition)
                .with_value("a-late")
                .with_gate(gate.clone()),
        )
        .await
        .unwrap();

    journal
        .wait_for(Duration::from_secs(60), "b owns both", |e| {
            balanced(e, &["b"], 2)
        })
        .await;
    assert!(!a_lease.is_valid(), "a fenced itself before b took over");
    assert!(!gate.is_open());
    let b_out =
        Producer::with_cluster(out_client(&tk, "b-out").await, ProducerOptions::default()).unwrap();
    b_out
        .send(
            ProducerRecord::new(TOPIC)
                .with_partition(tp.partition)
                .with_value("b-first"),
        )
        .await
        .unwrap();

    // The network heals for a's producer: its next retry would land now.
    assert!(tk.remove_fault(produce_cut).await.unwrap());
    let healed = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(180), late)
        .await
        .expect("a's record gets an outcome within delivery.timeout.ms");
    match outcome {
        Err(ClientError::SendGateClosed {
            ref topic,
            partition,
            records: 1,
            ..
        }) if topic == TOPIC && partition == tp.partition => {}
        other => panic!("a's late record must fail unsent, got {other:?}"),
    }
    // Give any resend every chance to arrive.
    tokio::time::sleep(Duration::from_secs(30)).await;
    b_out
        .send(
            ProducerRecord::new(TOPIC)
                .with_partition(tp.partition)
                .with_value("b-second"),
        )
        .await
        .unwrap();

    assert_eq!(
        log_of(&tk, tp.partition).await,
        ["a-before", "b-first", "b-second"],
        "nothing of a's after its lease ended (healed at +{:?})",
        healed.elapsed()
    );
    // a's producer goes on (a new epoch after the dropped sequence).
    a_out
        .send(
            ProducerRecord::new(TOPIC)
                .with_partition(tp.partition)
                .with_value("a-ungated"),
        )
        .await
        .unwrap();
    a_out.close().await;
    b_out.close().await;
    drop((a.stop().await, b.stop().await));
}
