//! Running the built `weir` binary from a test, bounded in time.

// Each test file uses what it needs of this module.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long one run of `weir` may take before the test kills it and fails.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `weir args…` to its end, with `stdin` written to it (or no stdin),
/// off the runtime so that an in-process cluster keeps serving, killing it
/// if it runs longer than [`RUN_TIMEOUT`].
pub async fn weir(args: Vec<String>, stdin: Option<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&args)
            .env_remove("KAFKA_BOOTSTRAP")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(input) = stdin {
            // Dropped at the end of the statement: the end of stdin.
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        wait_bounded(child, &args.join(" "))
    })
    .await
    .unwrap()
}

/// Waits for `child`'s output, killing it after [`RUN_TIMEOUT`] (and
/// failing the test, naming `what`).
pub fn wait_bounded(child: Child, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN_TIMEOUT) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let output = rx.recv().unwrap().unwrap();
            panic!(
                "weir {what}: still running after {RUN_TIMEOUT:?}; killed. stdout: {:?}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
    }
}
