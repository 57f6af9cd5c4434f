//! A transaction committed by Weir is read exactly by a librdkafka
//! read_committed consumer; an aborted one is invisible to it.
//!
//! The broker is weir-testkit's standalone binary (`weir-testkit serve`)
//! when `$WEIR_TESTKIT_BIN` names it, else the same cluster in process
//! (printed). Needs `$WEIR_PYTHON` (see common_interop); without it the
//! test prints that it skipped, and fails under `WEIR_EXPECT_BROKER=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Only part of the shared interop helpers is used here.
#[allow(dead_code)]
mod common_interop;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common_interop::base64;
use common_interop::kafka_tool;
use common_interop::tools_or_skip;
use weir_client::Cluster;
use weir_client::admin::{Admin, NewTopic};
use weir_client::config::ClientConfig;
use weir_client::producer::ProducerRecord;
use weir_client::transaction::{TransactionConfig, TransactionalProducer};

/// Kills the standalone broker when the test ends.
struct Standalone(Child);

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

enum Broker {
    /// The child process lives as long as the test needs the broker.
    Standalone(#[allow(dead_code)] Standalone, String),
    InProcess(weir_testkit::Cluster),
}

impl Broker {
    fn bootstrap(&self) -> String {
        match self {
            Broker::Standalone(_, b) => b.clone(),
            Broker::InProcess(c) => c.bootstrap(),
        }
    }
}

async fn broker() -> Broker {
    match std::env::var("WEIR_TESTKIT_BIN") {
        Ok(bin) if !bin.is_empty() => {
            let mut child = Command::new(&bin)
                .args(["serve", "--port", "0", "--no-auto-create"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
            let stdout = child.stdout.take().unwrap();
            let first = tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                BufReader::new(stdout).read_line(&mut line).unwrap();
                line
            })
            .await
            .unwrap();
            println!("broker: {bin} serve at {}", first.trim());
            Broker::Standalone(Standalone(child), first.trim().to_owned())
        }
        _ => {
            println!(
                "broker: in-process weir-testkit (set WEIR_TESTKIT_BIN for the standalone binary)"
            );
            Broker::InProcess(weir_testkit::Cluster::builder().build().await.unwrap())
        }
    }
}

async fn in_one_transaction(bootstrap: &str, tid: &str, values: &[String], commit: bool) {
    let config = ClientConfig::from_properties(&[("bootstrap.servers", bootstrap)]).unwrap();
    let cluster = Cluster::connect(config).await.unwrap();
    let p = TransactionalProducer::with_cluster(
        cluster,
        Default::default(),
        TransactionConfig::new(tid),
    )
    .unwrap();
    p.init_transactions().await.unwrap();
    p.begin().unwrap();
    for v in values {
        p.send(
            ProducerRecord::new("interop-txn")
                .with_partition(0)
                .with_value(v.clone()),
        )
        .await
        .unwrap();
    }
    if commit {
        p.commit().await.unwrap();
    } else {
        p.abort().await.unwrap();
    }
    p.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_read_committed_sees_weir_s_commits_and_not_its_aborts() {
    let Some(tools) = tools_or_skip("txn_interop") else {
        return;
    };
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    let admin = Admin::connect(
        ClientConfig::from_properties(&[("bootstrap.servers", bootstrap.as_str())]).unwrap(),
    )
    .await
    .unwrap();
    admin
        .create_topic(NewTopic::new("interop-txn", 1))
        .await
        .unwrap();

    let committed: Vec<String> = (0..20).map(|i| format!("committed-{i}")).collect();
    let aborted: Vec<String> = (0..20).map(|i| format!("aborted-{i}")).collect();
    let after: Vec<String> = (0..5).map(|i| format!("after-{i}")).collect();
    in_one_transaction(&bootstrap, "interop-tx", &committed, true).await;
    in_one_transaction(&bootstrap, "interop-tx", &aborted, false).await;
    in_one_transaction(&bootstrap, "interop-tx", &after, true).await;

    let out = kafka_tool::run(
        &tools,
        &bootstrap,
        [
            "consume",
            "-t",
            "interop-txn",
            "--isolation",
            "read_committed",
            "--from-beginning",
            "--until-eof",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect(),
        String::new(),
    )
    .await;
    assert_eq!(out.status, 0, "kafka_tool: {}", out.stderr);
    let seen: Vec<String> = out
        .lines
        .iter()
        .map(|l| {
            let v = l["value"].as_str().unwrap();
            String::from_utf8(base64::decode(v).unwrap()).unwrap()
        })
        .collect();
    let expected: Vec<String> = committed.iter().chain(&after).cloned().collect();
    assert_eq!(seen, expected, "librdkafka read_committed");
}
