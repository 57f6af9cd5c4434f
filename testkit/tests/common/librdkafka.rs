//! Running librdkafka (through `scripts/interop/kafka_tool.py` and
//! confluent-kafka) against the standalone `weir-testkit` binary.
//!
//! These tests need `$WEIR_PYTHON` (set up by `scripts/pyenv.sh`). Without
//! it they print "skipped: ..." and pass, unless `WEIR_EXPECT_BROKER=1`,
//! in which case a missing client is a failure: CI must never be silently green.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// The Python with confluent-kafka, or `None` after printing why the test is skipped.
pub fn python_or_skip(test: &str) -> Option<PathBuf> {
    match std::env::var_os("WEIR_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            assert!(
                std::env::var("WEIR_EXPECT_BROKER").as_deref() != Ok("1"),
                "{test}: WEIR_EXPECT_BROKER=1 but WEIR_PYTHON is unset (run scripts/pyenv.sh)"
            );
            println!(
                "skipped: {test}: WEIR_PYTHON is unset (run scripts/pyenv.sh to get librdkafka)"
            );
            None
        }
    }
}

/// A `weir-testkit serve` child process, killed on drop.
pub struct Server {
    child: Child,
    /// The bootstrap servers it printed.
    pub bootstrap: String,
}

impl Server {
    /// Starts the binary on free ports and waits for its bootstrap line.
    pub fn start(brokers: u32) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir-testkit"))
            .args(["serve", "--port", "0", "--brokers", &brokers.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let bootstrap = line.trim().to_owned();
        assert!(
            bootstrap.starts_with("127.0.0.1:"),
            "unexpected first line {bootstrap:?}"
        );
        Self { child, bootstrap }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The output of one kafka_tool run.
pub struct ToolOutput {
    pub status: i32,
    pub lines: Vec<Value>,
    pub stderr: String,
}

/// Runs `kafka_tool.py -b BOOTSTRAP ARGS...` with `stdin`.
pub fn kafka_tool(python: &PathBuf, bootstrap: &str, args: &[&str], stdin: &str) -> ToolOutput {
    let tool = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/interop/kafka_tool.py");
    let mut child = Command::new(python)
        .arg(tool)
        .args(["-b", bootstrap])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// JSON lines for `produce`: one record per (key, value).
pub fn records_json(records: &[(String, String)]) -> String {
    records
        .iter()
        .map(|(k, v)| serde_json::json!({"key": k, "value": v}).to_string() + "\n")
        .collect()
}
