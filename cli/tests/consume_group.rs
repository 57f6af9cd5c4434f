//! `weir consume --group` run as a user runs it: the built binary, twice in
//! a row against an in-process weir-testkit cluster, or stopped with a
//! signal.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use weir_client::admin::Admin;
use weir_client::config::ClientConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::producer::{Producer, ProducerRecord};
use weir_testkit::Cluster;

/// How long one run may take before it counts as hung (it then fails the
/// test: a consumer waiting for records that were committed unseen).
mod support;

use support::{RUN_TIMEOUT, wait_bounded};

/// A cluster with `topic` (one partition) holding `values`, in order.
async fn cluster_with(topic: &str, values: &[&str]) -> Cluster {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let none: [(&str, &str); 0] = [];
    cluster.create_topic(topic, 1, none).await.unwrap();
    let config =
        ProducerConfig::from_properties(&[("bootstrap.servers", cluster.bootstrap().as_str())])
            .unwrap();
    let producer = Producer::new(config).await.unwrap();
    for value in values {
        producer
            .send(ProducerRecord::new(topic).with_value((*value).to_owned()))
            .await
            .unwrap();
    }
    producer.close().await;
    cluster
}

/// Runs `weir args…`, bounded ([`support::weir`]).
async fn weir(args: Vec<String>) -> Output {
    support::weir(args, None).await
}

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_consume_with_count_commits_only_what_it_printed() {
    let cluster = cluster_with("letters", &["a", "b", "c", "d", "e"]).await;
    let bootstrap = cluster.bootstrap();
    let run = || {
        weir(strings(&[
            "consume",
            "-b",
            &bootstrap,
            "-G",
            "readers",
            "-t",
            "letters",
            "--from-beginning",
            "--count",
            "2",
        ]))
    };
    let mut printed = Vec::new();
    for _ in 0..2 {
        let out = run().await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        printed.push(String::from_utf8(out.stdout).unwrap());
    }
    assert_eq!(printed, ["a\nb\n", "c\nd\n"]);
}

/// The group's members, as the coordinator lists them.
async fn members(cluster: &Cluster, group: &str) -> usize {
    let admin = Admin::connect(
        ClientConfig::from_properties(&[("bootstrap.servers", cluster.bootstrap().as_str())])
            .unwrap(),
    )
    .await
    .unwrap();
    let described = admin.describe_groups(&[group]).await.unwrap();
    described.iter().map(|g| g.members.len()).sum()
}

/// Starts a group consume that runs until stopped, waits until it printed
/// every record, sends `signal`, and returns how it exited with what it
/// printed.
async fn consume_then_signal(cluster: &Cluster, group: &str, signal: &str) -> (ExitStatus, String) {
    let args = strings(&[
        "consume",
        "-b",
        &cluster.bootstrap(),
        "-G",
        group,
        "-t",
        "letters",
        "--from-beginning",
    ]);
    let signal = signal.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&args)
            .env_remove("KAFKA_BOOTSTRAP")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let stdout = child.stdout.take().unwrap();
        // Read the records on a thread, so a consumer that never prints
        // them fails the test after the bound instead of hanging it.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout);
            let mut printed = String::new();
            for _ in 0..3 {
                let mut line = String::new();
                if lines.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                printed.push_str(&line);
            }
            let _ = tx.send(printed.clone());
            let mut rest = String::new();
            let _ = lines.read_to_string(&mut rest);
            let _ = tx.send(rest);
        });
        let Ok(printed) = rx.recv_timeout(RUN_TIMEOUT) else {
            let _ = child.kill();
            panic!("no records printed within {RUN_TIMEOUT:?}");
        };
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let output = wait_bounded(child, "consume (signalled)");
        let rest = rx.recv().unwrap_or_default();
        assert!(
            output.status.success(),
            "weir consume after SIG{signal}: {:?}; stderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status, printed + &rest)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_and_sigterm_leave_the_group_and_commit_what_was_printed() {
    let cluster = cluster_with("letters", &["a", "b", "c"]).await;
    for (signal, group) in [("TERM", "terminated"), ("INT", "interrupted")] {
        let (status, printed) = consume_then_signal(&cluster, group, signal).await;
        assert_eq!(printed, "a\nb\nc\n", "SIG{signal}: {status:?}");
        // The member left: a rerun joins at once instead of waiting for
        // the coordinator to expire the old member's session.
        assert_eq!(members(&cluster, group).await, 0, "SIG{signal}");
        // What was printed was committed: a rerun prints nothing old.
        let admin = Admin::connect(
            ClientConfig::from_properties(&[("bootstrap.servers", cluster.bootstrap().as_str())])
                .unwrap(),
        )
        .await
        .unwrap();
        let committed = admin.list_group_offsets(group).await.unwrap();
        assert_eq!(
            committed.iter().map(|c| c.offset).collect::<Vec<_>>(),
            [3],
            "SIG{signal}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_produce_waiting_on_stdin_with_what_it_read_delivered() {
    let cluster = cluster_with("letters", &[]).await;
    let args = strings(&["produce", "-b", &cluster.bootstrap(), "-t", "letters"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(&args)
        .env_remove("KAFKA_BOOTSTRAP")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Two lines, and stdin left open: the producer waits for more.
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"x\ny\n").unwrap();
    let mut delivered = false;
    for _ in 0..600 {
        let (_, _, end) = cluster.offsets("letters", 0).await.unwrap();
        if end == 2 {
            delivered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(delivered, "the two lines were not produced within 60 s");
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let output = tokio::task::spawn_blocking(move || wait_bounded(child, "produce (signalled)"))
        .await
        .unwrap();
    drop(stdin);
    assert!(
        output.status.success(),
        "weir produce after SIGTERM: {:?}; stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_transactional_produce_before_the_end_of_stdin_sending_nothing() {
    let cluster = cluster_with("letters", &[]).await;
    let args = strings(&[
        "produce",
        "-b",
        &cluster.bootstrap(),
        "-t",
        "letters",
        "--transactional-id",
        "tx",
    ]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(&args)
        .env_remove("KAFKA_BOOTSTRAP")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"x\n").unwrap();
    // Once the command talks to the cluster, its signal handlers are in place.
    let mut started = false;
    for _ in 0..600 {
        let requests = cluster.requests().await.unwrap();
        if requests
            .iter()
            .any(|r| r.client_id.as_deref() == Some("weir-cli"))
        {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        started,
        "weir produce did not reach the cluster within 60 s"
    );
    let pid = child.id().to_string();
    let output = tokio::task::spawn_blocking(move || {
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        wait_bounded(child, "transactional produce (signalled)")
    })
    .await
    .unwrap();
    drop(stdin);
    assert!(!output.status.success(), "{output:?}");
    let (_, _, end) = cluster.offsets("letters", 0).await.unwrap();
    assert_eq!(end, 0, "nothing was sent");
}
