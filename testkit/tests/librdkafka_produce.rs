//! Fidelity: librdkafka (confluent-kafka, a client nobody here wrote)
//! produces and consumes against the testkit, with the idempotent producer.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::librdkafka::{Server, kafka_tool, python_or_skip, records_json};
use serde_json::Value;
use weir_protocol::ApiKey;
use weir_testkit::{Cluster, Intercept, InterceptAction, RequestMatcher};

fn str_of(v: &Value, field: &str) -> String {
    v[field].as_str().unwrap_or_default().to_owned()
}

#[test]
fn idempotent_producer_round_trips_every_codec_across_three_brokers() {
    let Some(py) =
        python_or_skip("idempotent_producer_round_trips_every_codec_across_three_brokers")
    else {
        return;
    };
    let server = Server::start(3);
    let bs = server.bootstrap.as_str();
    let out = kafka_tool(
        &py,
        bs,
        &["create-topic", "-t", "codecs", "--partitions", "3"],
        "",
    );
    assert_eq!(out.status, 0, "{}", out.stderr);

    let mut produced: Vec<(String, String)> = Vec::new();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let records: Vec<(String, String)> = (0..20)
            .map(|i| (format!("key-{i}"), format!("{codec}-{i}")))
            .collect();
        let out = kafka_tool(
            &py,
            bs,
            &["produce", "-t", "codecs", "-z", codec, "--acks", "all"],
            &records_json(&records),
        );
        assert_eq!(out.status, 0, "{codec}: {}", out.stderr);
        assert_eq!(out.lines.len(), 20);
        assert!(
            out.lines.iter().all(|r| r.get("error").is_none()),
            "{codec}: {:?}",
            out.lines
        );
        produced.extend(records);
    }

    let out = kafka_tool(
        &py,
        bs,
        &[
            "consume",
            "-t",
            "codecs",
            "--from-beginning",
            "--count",
            "100",
            "--timeout",
            "30",
        ],
        "",
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.lines.len(), 100);
    // Per partition: offsets 0.. without gaps, and records in produce order.
    let mut by_partition: BTreeMap<i64, Vec<(i64, String, String)>> = BTreeMap::new();
    for r in &out.lines {
        by_partition
            .entry(r["partition"].as_i64().unwrap())
            .or_default()
            .push((
                r["offset"].as_i64().unwrap(),
                str_of(r, "key"),
                str_of(r, "value"),
            ));
    }
    assert_eq!(by_partition.len(), 3, "keys spread over every partition");
    for records in by_partition.values() {
        let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
        assert_eq!(offsets, (0..records.len() as i64).collect::<Vec<_>>());
        let in_order: Vec<&(String, String)> = produced
            .iter()
            .filter(|(k, v)| records.iter().any(|r| &r.1 == k && &r.2 == v))
            .collect();
        let got: Vec<(String, String)> =
            records.iter().map(|r| (r.1.clone(), r.2.clone())).collect();
        assert_eq!(got, in_order.into_iter().cloned().collect::<Vec<_>>());
    }
    let out = kafka_tool(&py, bs, &["offsets", "-t", "codecs"], "");
    assert_eq!(out.status, 0, "{}", out.stderr);
    let total: i64 = out
        .lines
        .iter()
        .map(|r| r["high"].as_i64().unwrap() - r["low"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 100, "watermarks match what was produced");
}

#[test]
fn a_retried_produce_whose_response_was_lost_is_written_once() {
    let Some(py) = python_or_skip("a_retried_produce_whose_response_was_lost_is_written_once")
    else {
        return;
    };
    let rt = runtime();
    let cluster = rt.block_on(async {
        let cluster = Cluster::builder().build().await.unwrap();
        cluster
            .create_topic("retry", 1, [] as [(&str, &str); 0])
            .await
            .unwrap();
        // The first Produce is appended, but librdkafka never hears back.
        let lose = Intercept::new(
            RequestMatcher::api(ApiKey::Produce),
            InterceptAction::DropResponse,
        )
        .times(1);
        cluster.intercept(lose).await.unwrap();
        cluster
    });
    let records: Vec<(String, String)> =
        (0..5).map(|i| ("k".to_owned(), format!("v{i}"))).collect();
    let out = kafka_tool(
        &py,
        &cluster.bootstrap(),
        &[
            "produce",
            "-t",
            "retry",
            "--linger-ms",
            "50",
            "-X",
            // librdkafka's client-side request timeout (request.timeout.ms
            // is only the broker-side ack timeout).
            "socket.timeout.ms=1500",
            "--timeout",
            "30",
        ],
        &records_json(&records),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let offsets: Vec<i64> = out
        .lines
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(
        offsets,
        vec![0, 1, 2, 3, 4],
        "the retry was acknowledged with the original offsets"
    );

    let (hwm, produces) = rt.block_on(async {
        let hwm = cluster.offsets("retry", 0).await.unwrap().2;
        let log = cluster.requests().await.unwrap();
        (
            hwm,
            log.iter().filter(|r| r.api_key == ApiKey::Produce).count(),
        )
    });
    assert!(
        produces >= 2,
        "librdkafka retried ({produces} Produce requests)"
    );
    assert_eq!(hwm, 5, "the retried batch was not appended twice");
    let out = kafka_tool(
        &py,
        &cluster.bootstrap(),
        &[
            "consume",
            "-t",
            "retry",
            "--from-beginning",
            "--until-eof",
            "--timeout",
            "20",
        ],
        "",
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let values: Vec<String> = out.lines.iter().map(|r| str_of(r, "value")).collect();
    assert_eq!(
        values,
        records.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>()
    );
}

#[test]
fn a_leader_move_mid_produce_is_followed_without_loss_or_duplicates() {
    let Some(py) =
        python_or_skip("a_leader_move_mid_produce_is_followed_without_loss_or_duplicates")
    else {
        return;
    };
    let rt = runtime();
    let cluster = rt.block_on(async {
        let cluster = Cluster::builder().brokers(3).build().await.unwrap();
        cluster
            .create_topic("moving", 1, [] as [(&str, &str); 0])
            .await
            .unwrap();
        // Hold the first Produce to the old leader until the move below.
        let hold = Intercept::new(
            RequestMatcher::api(ApiKey::Produce).broker(0),
            InterceptAction::Delay(std::time::Duration::from_secs(2)),
        );
        cluster.intercept(hold.times(1)).await.unwrap();
        cluster
    });
    let bootstrap = cluster.bootstrap();
    let records: Vec<(String, String)> =
        (0..5).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    let input = records_json(&records);
    let producer = std::thread::spawn(move || {
        kafka_tool(
            &py,
            &bootstrap,
            &[
                "produce",
                "-t",
                "moving",
                "--linger-ms",
                "20",
                "--timeout",
                "30",
            ],
            &input,
        )
    });
    rt.block_on(async {
        // Wait (on the request log, not on a clock) until the Produce reached broker 0.
        loop {
            let seen = cluster
                .requests()
                .await
                .unwrap()
                .iter()
                .any(|r| r.api_key == ApiKey::Produce);
            if seen {
                break;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        cluster.move_leader("moving", 0, 2).await.unwrap();
    });
    let out = producer.join().unwrap();
    assert_eq!(out.status, 0, "{}", out.stderr);
    let offsets: Vec<i64> = out
        .lines
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    let produce_brokers: Vec<i32> = rt.block_on(async {
        cluster
            .requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.api_key == ApiKey::Produce)
            .map(|r| r.broker_id)
            .collect()
    });
    assert_eq!(
        produce_brokers.first(),
        Some(&0),
        "first sent to the old leader"
    );
    assert_eq!(produce_brokers.last(), Some(&2), "then followed the move");
    assert_eq!(rt.block_on(cluster.offsets("moving", 0)).unwrap().2, 5);
}

#[test]
fn a_consumer_follows_a_leader_move_and_reads_everything_once() {
    let Some(py) = python_or_skip("a_consumer_follows_a_leader_move_and_reads_everything_once")
    else {
        return;
    };
    let rt = runtime();
    let cluster = rt.block_on(async {
        let cluster = Cluster::builder().brokers(2).build().await.unwrap();
        cluster
            .create_topic("follow", 1, [] as [(&str, &str); 0])
            .await
            .unwrap();
        cluster
    });
    let bootstrap = cluster.bootstrap();
    let first: Vec<(String, String)> = (0..5).map(|i| ("k".to_owned(), format!("a{i}"))).collect();
    let out = kafka_tool(
        &py,
        &bootstrap,
        &["produce", "-t", "follow"],
        &records_json(&first),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);

    let consumer = {
        let (py, bootstrap) = (py.clone(), bootstrap.clone());
        std::thread::spawn(move || {
            kafka_tool(
                &py,
                &bootstrap,
                &[
                    "consume",
                    "-t",
                    "follow",
                    "--from-beginning",
                    "--count",
                    "10",
                    "--timeout",
                    "30",
                ],
                "",
            )
        })
    };
    rt.block_on(async {
        // Once the consumer has fetched from broker 0, move the leader under it.
        loop {
            let fetched = cluster
                .requests()
                .await
                .unwrap()
                .iter()
                .any(|r| r.api_key == ApiKey::Fetch && r.broker_id == 0);
            if fetched {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        cluster.move_leader("follow", 0, 1).await.unwrap();
    });
    let second: Vec<(String, String)> = (0..5).map(|i| ("k".to_owned(), format!("b{i}"))).collect();
    let out = kafka_tool(
        &py,
        &bootstrap,
        &["produce", "-t", "follow"],
        &records_json(&second),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);

    let out = consumer.join().unwrap();
    assert_eq!(out.status, 0, "{}", out.stderr);
    let values: Vec<String> = out.lines.iter().map(|r| str_of(r, "value")).collect();
    let want: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|(_, v)| v.clone())
        .collect();
    assert_eq!(values, want, "every record once, in order, across the move");
    let fetch_brokers: Vec<i32> = rt.block_on(async {
        cluster
            .requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.api_key == ApiKey::Fetch)
            .map(|r| r.broker_id)
            .collect()
    });
    assert_eq!(
        fetch_brokers.last(),
        Some(&1),
        "the consumer fetched from the new leader"
    );
}

/// A runtime for the cluster while librdkafka runs in a child process: the
/// cluster keeps serving on its worker threads while the test blocks.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
