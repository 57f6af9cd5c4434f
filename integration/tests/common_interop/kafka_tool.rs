//! Running `kafka_tool.py` (confluent-kafka or kafka-python) from a test.

use std::fmt;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::Tools;

/// The independent client that reads records back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// confluent-kafka, i.e. librdkafka.
    Librdkafka,
    /// kafka-python, a pure-Python client.
    KafkaPython,
}

impl Reader {
    /// Both readers.
    pub const ALL: [Reader; 2] = [Reader::Librdkafka, Reader::KafkaPython];

    /// kafka_tool.py's `--client` value.
    fn client_arg(self) -> &'static str {
        match self {
            Reader::Librdkafka => "confluent-kafka",
            Reader::KafkaPython => "kafka-python",
        }
    }
}

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reader::Librdkafka => "librdkafka",
            Reader::KafkaPython => "kafka-python",
        })
    }
}

/// What one kafka_tool run printed.
#[derive(Debug)]
pub struct ToolOutput {
    /// The exit status (-1 if killed by a signal).
    pub status: i32,
    /// stdout, one JSON value per line.
    pub lines: Vec<Value>,
    /// stderr, for failure messages.
    pub stderr: String,
}

/// Runs `kafka_tool.py -b BOOTSTRAP --encoding base64 ARGS...` with
/// `stdin`, on the blocking pool so the test's runtime keeps serving the
/// in-process cluster and Weir's clients meanwhile.
pub async fn run(tools: &Tools, bootstrap: &str, args: Vec<String>, stdin: String) -> ToolOutput {
    let tools = tools.clone();
    let bootstrap = bootstrap.to_owned();
    tokio::task::spawn_blocking(move || run_blocking(&tools, &bootstrap, &args, &stdin))
        .await
        .unwrap()
}

fn run_blocking(tools: &Tools, bootstrap: &str, args: &[String], stdin: &str) -> ToolOutput {
    let mut child = Command::new(&tools.python)
        .arg(&tools.kafka_tool)
        .args(["-b", bootstrap, "--encoding", "base64"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {} {:?}: {e}", tools.python.display(), args));
    // Dropped at the end of the statement, which closes stdin: the tool reads to EOF.
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    ToolOutput {
        status: out.status.code().unwrap_or(-1),
        lines: stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Reads `count` records of every partition of `topic` from the start with
/// `reader`, within `timeout_s` seconds.
pub async fn consume(
    tools: &Tools,
    bootstrap: &str,
    reader: Reader,
    topic: &str,
    count: usize,
    timeout_s: u32,
) -> ToolOutput {
    let args = [
        "consume",
        "-t",
        topic,
        "--from-beginning",
        "--count",
        &count.to_string(),
        "--timeout",
        &timeout_s.to_string(),
        "--client",
        reader.client_arg(),
    ];
    run(
        tools,
        bootstrap,
        args.iter().map(|a| (*a).to_owned()).collect(),
        String::new(),
    )
    .await
}

/// Produces JSON-line `records` to `topic` with librdkafka (its
/// `murmur2_random` partitioner, idempotent, acks=all) compressed with
/// `codec`; returns one delivery report per record.
pub async fn produce(
    tools: &Tools,
    bootstrap: &str,
    topic: &str,
    codec: &str,
    records: String,
) -> ToolOutput {
    let args = ["produce", "-t", topic, "-z", codec, "--timeout", "30"];
    run(
        tools,
        bootstrap,
        args.iter().map(|a| (*a).to_owned()).collect(),
        records,
    )
    .await
}
