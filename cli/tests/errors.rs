//! Mistakes a user makes on a first try get one clear line and a non-zero
//! exit: a group that does not exist, a port that is not a Kafka broker.
//! Run through the built binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Output;

use weir_testkit::Cluster;

mod support;

/// Runs `weir args…`, bounded ([`support::weir`]).
async fn weir(args: &[&str]) -> Output {
    support::weir(args.iter().map(|a| (*a).to_owned()).collect(), None).await
}

/// The one `weir: error:` line of a run that failed with exit status 1
/// (log lines, if any, are not counted).
fn one_line_failure(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("weir: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    errors[0].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describing_a_group_that_does_not_exist_says_so() {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let b = cluster.bootstrap();
    let out = weir(&["groups", "describe", "-b", &b, "no-such-group"]).await;
    assert_eq!(
        one_line_failure(&out),
        "weir: error: unknown group no-such-group"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_takes_the_topic_as_a_positional_argument_too() {
    let cluster = Cluster::builder().brokers(1).build().await.unwrap();
    let none: [(&str, &str); 0] = [];
    cluster.create_topic("t", 2, none).await.unwrap();
    let b = cluster.bootstrap();
    let positional = weir(&["offsets", "-b", &b, "t"]).await;
    let flagged = weir(&["offsets", "-b", &b, "-t", "t"]).await;
    for out in [&positional, &flagged] {
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(positional.stdout, flagged.stdout);
    assert_eq!(
        String::from_utf8_lossy(&positional.stdout),
        "partition\tearliest\tlatest\n0\t0\t0\n1\t0\t0\n"
    );
    let neither = weir(&["offsets", "-b", &b]).await;
    assert_eq!(neither.status.code(), Some(2), "{neither:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_answers_http_is_named_as_such() {
    // An HTTP server that answers anything with a 400, as most do to a
    // Kafka request.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 256];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let out = weir(&["topics", "list", "-b", &address]).await;
    let line = one_line_failure(&out);
    assert!(
        line.contains("this endpoint does not speak the Kafka protocol (it answered like HTTP)"),
        "{line}"
    );
    assert!(!line.contains("1213486160"), "{line}");
}
