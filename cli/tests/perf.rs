//! `weir perf produce` then `weir perf consume` against an in-process
//! weir-testkit cluster, through the built binary.

#![allow(clippy::unwrap_used)] // a test: its helpers fail the test by unwrapping

use std::process::Command;

use weir_testkit::Cluster;

const TOPIC: &str = "perf";
const RECORDS: u64 = 2000;

/// Runs the binary with `args` (off the runtime, so the cluster keeps serving)
/// and returns its stdout; fails the test on a non-zero exit.
async fn weir(args: Vec<String>) -> String {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weir {:?}: {stderr}\n{stdout}",
        out.status
    );
    stdout
}

fn args(bootstrap: &str, rest: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = rest.iter().map(|s| (*s).to_owned()).collect();
    v.extend([
        "-b".to_owned(),
        bootstrap.to_owned(),
        "-t".to_owned(),
        TOPIC.to_owned(),
    ]);
    v
}

/// The summary's JSON, checked for the record count and ordered percentiles.
fn check_summary(stdout: &str) -> serde_json::Value {
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["records"], RECORDS, "{summary}");
    assert_eq!(summary["errors"], 0, "{summary}");
    let l = &summary["latency_ms"];
    let [p50, p99, p999, max] =
        ["p50", "p99", "p999", "max"].map(|q| l[q].as_f64().unwrap_or(f64::NAN));
    assert!(p50 <= p99 && p99 <= p999 && p999 <= max, "{summary}");
    assert!(
        summary["records_per_sec"].as_f64().unwrap() > 0.0,
        "{summary}"
    );
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_produce_then_consume_counts_every_record() {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let none: [(&str, &str); 0] = [];
    cluster.create_topic(TOPIC, 3, none).await.unwrap();
    let bootstrap = cluster.bootstrap();

    let produced = weir(args(
        &bootstrap,
        &[
            "perf",
            "produce",
            "--records",
            "2000",
            "--record-size",
            "64",
            "--acks",
            "all",
            "-z",
            "lz4",
            "--json",
        ],
    ))
    .await;
    let summary = check_summary(&produced);
    assert_eq!(summary["bytes"], RECORDS * (64 + 8), "{summary}");

    // The topic really holds them: `weir offsets` rows are `partition earliest latest`.
    let offsets = weir(args(&bootstrap, &["offsets"])).await;
    let total: i64 = offsets
        .lines()
        .skip(1)
        .map(|row| {
            let cols: Vec<i64> = row.split('\t').map(|c| c.parse().unwrap()).collect();
            cols[2] - cols[1]
        })
        .sum();
    assert_eq!(total, 2000, "{offsets}");

    let consumed = weir(args(
        &bootstrap,
        &["perf", "consume", "--records", "2000", "--json"],
    ))
    .await;
    let summary = check_summary(&consumed);
    assert_eq!(summary["bytes"], RECORDS * (64 + 8), "{summary}");

    // In a group, from the beginning too; the text summary by default.
    let text = weir(args(
        &bootstrap,
        &["perf", "consume", "--records", "2000", "-G", "perf-g"],
    ))
    .await;
    assert!(text.starts_with("2000 records read, "), "{text}");
}
