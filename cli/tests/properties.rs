//! `-X key=value` is checked against the client each command builds: the
//! producer's properties for `produce` and `perf produce`, the consumer's
//! for `consume`, the admin client's for the others. Run through the built
//! binary against an in-process weir-testkit cluster.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;

use weir_testkit::Cluster;

mod support;

/// Runs `weir -b BOOTSTRAP args…` with `stdin`, bounded ([`support::weir`]).
async fn weir(bootstrap: &str, args: &[&str], stdin: &str) -> Output {
    let mut all: Vec<String> = vec!["-b".into(), bootstrap.into()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    support::weir(all, Some(stdin.to_owned())).await
}

fn succeeded(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_accepts_its_own_clients_properties() {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let none: [(&str, &str); 0] = [];
    cluster.create_topic("t", 1, none).await.unwrap();
    let b = cluster.bootstrap();

    let out = weir(
        &b,
        &[
            "produce",
            "-t",
            "t",
            "-X",
            "linger.ms=5",
            "-X",
            "acks=all",
            "-X",
            "client.id=me",
        ],
        "x\ny\n",
    )
    .await;
    succeeded(&out, "produce -X linger.ms=5 -X acks=all");

    let out = weir(
        &b,
        &[
            "perf",
            "produce",
            "-t",
            "t",
            "--records",
            "10",
            "-X",
            "linger.ms=5",
            "-X",
            "compression.type=lz4",
        ],
        "",
    )
    .await;
    succeeded(&out, "perf produce -X linger.ms=5");

    // Without --from-beginning, only auto.offset.reset=earliest makes a new
    // group read the records already there.
    let out = weir(
        &b,
        &[
            "consume",
            "-t",
            "t",
            "-G",
            "g",
            "--count",
            "2",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            "fetch.max.wait.ms=100",
        ],
        "",
    )
    .await;
    assert_eq!(
        succeeded(&out, "consume -X auto.offset.reset=earliest"),
        "x\ny\n"
    );

    let out = weir(
        &b,
        &[
            "consume",
            "-t",
            "t",
            "--from-beginning",
            "-e",
            "-X",
            "isolation.level=read_committed",
        ],
        "",
    )
    .await;
    assert!(
        succeeded(&out, "consume -X isolation.level").starts_with("x\ny\n"),
        "{out:?}"
    );

    let out = weir(&b, &["topics", "list", "-X", "request.timeout.ms=5000"], "").await;
    succeeded(&out, "topics list -X request.timeout.ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_key_is_one_line_naming_the_commands_client() {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let none: [(&str, &str); 0] = [];
    cluster.create_topic("t", 1, none).await.unwrap();
    let b = cluster.bootstrap();
    for (args, client) in [
        (
            &["produce", "-t", "t", "-X", "linger.msx=5"][..],
            "producer",
        ),
        (
            &[
                "perf",
                "produce",
                "-t",
                "t",
                "--records",
                "1",
                "-X",
                "ack=all",
            ],
            "producer",
        ),
        (&["consume", "-t", "t", "-X", "linger.ms=5"], "consumer"),
        (
            &["consume", "-t", "t", "-G", "g", "-X", "acks=all"],
            "consumer",
        ),
        (&["topics", "list", "-X", "linger.ms=5"], "admin client"),
    ] {
        let out = weir(&b, args, "x\n").await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let key = args.last().unwrap().split('=').next().unwrap();
        let expected =
            format!("weir: error: unknown property `{key}`: not among the {client}'s properties (");
        assert!(stderr.starts_with(&expected), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
}
