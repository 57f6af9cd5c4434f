//! Global tables on the runtime: every instance holds the whole topic before
//! any task processes, follows its updates, and a restart reads only the
//! tail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::Topology;
use weir_streams::dsl::{Materialized, StreamsBuilder};

const COUNTRIES: &str = "countries";
const EOS: [(&str, &str); 2] = [
    ("processing.guarantee", "exactly_once_v2"),
    ("num.stream.threads", "2"),
];

fn topology() -> Topology {
    let builder = StreamsBuilder::new();
    let countries =
        builder.global_table::<String, String>(COUNTRIES, Materialized::as_("countries"));
    builder
        .stream::<String, String>(INPUT) // key: order id, value: country code
        .left_join_global(
            &countries,
            |_order, code| code.clone(),
            |code, name| format!("{code}={}", name.map_or("?", String::as_str)),
        )
        .to(OUTPUT);
    builder.build().unwrap()
}

async fn produce(
    kit: &std::sync::Arc<weir_testkit::Cluster>,
    topic: &str,
    records: &[(String, String)],
) {
    let producer = Producer::with_cluster(client(kit, "feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for (k, v) in records {
        let r = ProducerRecord::new(topic)
            .with_key(k.clone())
            .with_value(v.clone());
        acks.push(producer.enqueue(r).await.unwrap());
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_global_table_is_whole_on_every_instance_before_processing_and_follows_updates() {
    let kit = testkit(1, 6).await;
    // Three partitions: not co-partitioned with the six of the orders.
    kit.create_topic(COUNTRIES, 3, std::iter::empty::<(String, String)>())
        .await
        .unwrap();
    let countries: Vec<(String, String)> = (0..30)
        .map(|c| (format!("c{c}"), format!("country-{c}")))
        .collect();
    produce(&kit, COUNTRIES, &countries).await;
    let orders: Vec<(String, String)> = (0..200)
        .map(|o| (format!("o{o}"), format!("c{}", o % 30)))
        .collect();
    produce(&kit, INPUT, &orders).await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(
        topology(),
        streams_config(&kit, "geo", "a", dirs[0].path(), &EOS),
    )
    .await;
    let b = start(
        topology(),
        streams_config(&kit, "geo", "b", dirs[1].path(), &EOS),
    )
    .await;
    // Each instance restored the whole table (every partition) at its start.
    assert_eq!(a.metrics().restored_records, 30, "{:?}", a.metrics());
    assert_eq!(b.metrics().restored_records, 30, "{:?}", b.metrics());
    eventually("every order joined", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() >= 200
    })
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len(), 200);
    for (_, order, value) in &out {
        let n: usize = order[1..].parse().unwrap();
        assert_eq!(
            value,
            &format!("c{}=country-{}", n % 30, n % 30),
            "order {order}"
        );
    }

    // An update of the table reaches both instances' copies while they run.
    produce(&kit, COUNTRIES, &[("c7".into(), "renamed".into())]).await;
    let mut probe = 0;
    eventually(
        "the renamed country in new joins",
        Duration::from_secs(60),
        || {
            probe += 1;
            let kit = &kit;
            let key = format!("probe{probe}");
            async move {
                produce(kit, INPUT, &[(key.clone(), "c7".into())]).await;
                read_committed(kit, OUTPUT)
                    .await
                    .iter()
                    .any(|(_, k, v)| k.starts_with("probe") && v == "c7=renamed")
            }
        },
    )
    .await;

    // A restart on the same state directory restores only what it missed.
    a.close(Duration::from_secs(30)).await.unwrap();
    produce(&kit, COUNTRIES, &[("c8".into(), "renamed too".into())]).await;
    let a2 = start(
        topology(),
        streams_config(&kit, "geo", "a", dirs[0].path(), &EOS),
    )
    .await;
    assert_eq!(
        a2.metrics().restored_records,
        1,
        "only the record written while it was down: {:?}",
        a2.metrics()
    );
    a2.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}
