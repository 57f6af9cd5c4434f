//! Fidelity of the coordinators: librdkafka (confluent-kafka, a client
//! nobody here wrote) runs transactions and a static cooperative consumer
//! group against the standalone binary.
//!
//! Without `$WEIR_PYTHON` these print "skipped: ..." and pass, unless
//! `WEIR_EXPECT_BROKER=1` (then they fail).

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::librdkafka::{Server, kafka_tool, python_or_skip, records_json};
use serde_json::Value;

/// Runs a scenario of `librdkafka/coordinator_scenarios.py`; its one JSON line.
fn scenario(python: &Path, name: &str, bootstrap: &str, topic: &str) -> Value {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/librdkafka/coordinator_scenarios.py");
    let out = Command::new(python)
        .arg(script)
        .args([name, bootstrap, topic])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{name}: no JSON ({e}); stderr: {stderr}"))
}

fn create_topic(py: &PathBuf, bootstrap: &str, topic: &str, partitions: u32) {
    let parts = partitions.to_string();
    let out = kafka_tool(
        py,
        bootstrap,
        &["create-topic", "-t", topic, "--partitions", &parts],
        "",
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
}

fn consume_values(py: &PathBuf, bootstrap: &str, topic: &str, isolation: &str) -> Vec<String> {
    let out = kafka_tool(
        py,
        bootstrap,
        &[
            "consume",
            "-t",
            topic,
            "--from-beginning",
            "--until-eof",
            "--isolation",
            isolation,
            "--timeout",
            "20",
        ],
        "",
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    out.lines
        .iter()
        .map(|r| r["value"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn read_committed_sees_exactly_the_committed_transactions() {
    let Some(py) = python_or_skip("read_committed_sees_exactly_the_committed_transactions") else {
        return;
    };
    let server = Server::start(3);
    let bs = server.bootstrap.as_str();
    create_topic(&py, bs, "txn", 1);
    let batch = |prefix: &str| -> Vec<(String, String)> {
        (0..4)
            .map(|i| (format!("k{i}"), format!("{prefix}-{i}")))
            .collect()
    };
    for (prefix, outcome) in [
        ("first", "--commit"),
        ("aborted", "--abort"),
        ("second", "--commit"),
    ] {
        let out = kafka_tool(
            &py,
            bs,
            &[
                "txn-produce",
                "-t",
                "txn",
                "--transactional-id",
                "fidelity-tx",
                outcome,
            ],
            &records_json(&batch(prefix)),
        );
        assert_eq!(out.status, 0, "{prefix}: {}", out.stderr);
    }
    let committed: Vec<String> = ["first", "second"]
        .iter()
        .flat_map(|p| batch(p).into_iter().map(|(_, v)| v))
        .collect();
    assert_eq!(consume_values(&py, bs, "txn", "read_committed"), committed);
    let everything: Vec<String> = ["first", "aborted", "second"]
        .iter()
        .flat_map(|p| batch(p).into_iter().map(|(_, v)| v))
        .collect();
    assert_eq!(
        consume_values(&py, bs, "txn", "read_uncommitted"),
        everything,
        "the aborted records are in the log, only hidden from read_committed"
    );
}

#[test]
fn a_second_producer_fences_the_first_whose_open_transaction_is_never_visible() {
    let Some(py) = python_or_skip(
        "a_second_producer_fences_the_first_whose_open_transaction_is_never_visible",
    ) else {
        return;
    };
    let server = Server::start(3);
    create_topic(&py, &server.bootstrap, "fence", 1);
    let out = scenario(&py, "fence", &server.bootstrap, "fence");
    assert_eq!(out["first_commit"], "_FENCED", "{out}");
    assert_eq!(out["first_commit_fatal"], true, "{out}");
    assert_eq!(out["read_committed"], serde_json::json!(["fresh"]), "{out}");
    assert_eq!(
        out["read_uncommitted"],
        serde_json::json!(["zombie-0", "zombie-1", "zombie-2", "fresh"]),
        "the fenced transaction's records are in the log but aborted: {out}"
    );
}

#[test]
fn a_static_cooperative_group_of_three_restarts_a_member_without_a_rebalance() {
    let Some(py) =
        python_or_skip("a_static_cooperative_group_of_three_restarts_a_member_without_a_rebalance")
    else {
        return;
    };
    let server = Server::start(3);
    create_topic(&py, &server.bootstrap, "grp", 6);
    let out = scenario(&py, "group", &server.bootstrap, "grp");
    for check in [
        // Three members, two partitions each, every partition owned once.
        "formed",
        "all_records_consumed",
        // A static member closes and comes back with the same instance id.
        "after_restart_settled",
        "restart_kept_assignment",
        // No callback fired on the other two: there was no rebalance.
        "others_untouched",
        // A member leaves for good; after its session the survivors take its
        // partitions incrementally, keeping their own.
        "after_leave_settled",
        "survivors_kept_theirs",
    ] {
        assert_eq!(out[check], true, "{check}: {out}");
    }
    assert_eq!(out["survivors_revoked"], serde_json::json!([0, 0]), "{out}");
    // A fourth member joins: each of the two gives up exactly one partition.
    assert_eq!(out["after_join_settled"], true, "{out}");
    assert_eq!(out["join_kept_the_rest"], true, "{out}");
    assert_eq!(out["join_revoked"], serde_json::json!([1, 1]), "{out}");
}
