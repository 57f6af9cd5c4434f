//! Every `weir …` command line shown in the repository's READMEs and in the
//! Markdown under `docs/` (the user guide) runs, in the order shown, against
//! an in-process weir-testkit cluster, and exits 0.
//!
//! The lines are read from the Markdown files themselves, so an edit that
//! breaks a documented command fails this test. The documented broker
//! address `127.0.0.1:9092` becomes the testkit's address and the documented
//! state directory `/var/lib/app/state` a temporary one holding a real task
//! store; each line runs in `sh` with the built `weir` first on `PATH`, in a
//! directory holding the `lines.txt` the README redirects from.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use weir_store::{ChangelogPartition, StoreOptions, TaskStore};
use weir_testkit::Cluster;

/// The broker address the READMEs use.
const DOCUMENTED_BROKERS: &str = "127.0.0.1:9092";
/// The state directory the READMEs use.
const DOCUMENTED_STATE_DIR: &str = "/var/lib/app/state";
/// The task directory under it that `weir store` lines name.
const DOCUMENTED_TASK: &str = "my-app/1_0";
/// Lines shown in the docs that this test does not run, each with why.
/// Every entry must still appear in the docs (a stale entry fails the test).
const EXCLUDED: &[(&str, &str)] = &[
    (
        "weir app describe -b 127.0.0.1:9092 my-app",
        "needs a running weir-streams application; cli/tests/app.rs runs it against one",
    ),
    (
        "weir app tasks -b 127.0.0.1:9092 my-app --json",
        "needs a running weir-streams application; cli/tests/app.rs runs it against one",
    ),
];
/// How long one command may take before it counts as hung.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A documented command line and where it is shown.
#[derive(Debug)]
struct DocLine {
    file: PathBuf,
    line: usize,
    text: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// Every README.md under the repository (outside build output and vendored
/// crates) and every Markdown file under docs/ (the user guide included),
/// sorted with the top-level README first.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !matches!(name.as_ref(), "target" | "vendor" | ".git" | "node_modules") {
                    walk(&path, out);
                }
            } else if name == "README.md" {
                out.push(path);
            }
        }
    }
    fn walk_docs(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                // `book` is the user guide's build output.
                if entry.file_name() != "book" {
                    walk_docs(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    walk_docs(&root.join("docs"), &mut files);
    files.sort_by_key(|p| (p != &root.join("README.md"), p.clone()));
    files.dedup();
    files
}

/// Whether a shell line runs `weir`: one of its pipeline or list elements
/// starts with `weir `, or it runs the binary through cargo.
fn runs_weir(line: &str) -> bool {
    line.contains("--bin weir ")
        || line
            .split(['|', ';', '&'])
            .any(|part| part.trim_start().starts_with("weir "))
}

/// The `weir` lines of the shell code blocks of one Markdown text, with
/// backslash continuations joined and a leading `$ ` prompt dropped.
fn weir_lines(file: &Path, markdown: &str) -> Vec<DocLine> {
    let mut found = Vec::new();
    let mut in_shell_block = false;
    let mut in_other_block = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, raw) in markdown.lines().enumerate() {
        let trimmed = raw.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            if in_shell_block || in_other_block {
                in_shell_block = false;
                in_other_block = false;
            } else if matches!(lang.trim(), "" | "sh" | "bash" | "shell" | "console") {
                in_shell_block = true;
            } else {
                in_other_block = true;
            }
            continue;
        }
        if !in_shell_block {
            continue;
        }
        let (start, mut text) = match pending.take() {
            Some((start, so_far)) => (start, so_far + " " + trimmed),
            None => (
                index + 1,
                trimmed.strip_prefix("$ ").unwrap_or(trimmed).to_owned(),
            ),
        };
        if let Some(head) = text.strip_suffix('\\') {
            text = head.trim_end().to_owned();
            pending = Some((start, text));
            continue;
        }
        if runs_weir(&text) {
            found.push(DocLine {
                file: file.to_path_buf(),
                line: start,
                text,
            });
        }
    }
    found
}

/// The line as the test runs it: cargo's build-and-run becomes the built
/// binary, and the documented broker and state directory become the test's.
fn runnable(text: &str, bootstrap: &str, state_dir: &Path) -> String {
    let text = match text.split_once("--bin weir --") {
        Some((_, args)) => format!("weir{args}"),
        None => text.to_owned(),
    };
    text.replace(DOCUMENTED_BROKERS, bootstrap)
        .replace(DOCUMENTED_STATE_DIR, &state_dir.display().to_string())
}

/// A task store with one committed key-value entry and changelog offset,
/// what `weir store scan|offsets` lines inspect.
fn make_task_store(task_dir: &Path) {
    let task = TaskStore::open(task_dir, StoreOptions::default()).expect("open task store");
    let counts = task.key_value_store("counts").expect("counts store");
    counts.put(b"weir", b"1").expect("put");
    task.commit(&[(ChangelogPartition::new("my-app-counts-changelog", 0), 1)])
        .expect("commit");
}

/// Runs one line in `sh`, killing it (and its pipeline) if it hangs.
/// Returns a description of the failure, if any.
fn run_line(script: &str, weir: &Path, work_dir: &Path) -> Result<String, String> {
    use std::os::unix::process::CommandExt as _;
    let bin_dir = weir.parent().expect("the binary has a directory");
    let path = match std::env::var_os("PATH") {
        Some(p) => {
            let mut dirs = vec![bin_dir.to_path_buf()];
            dirs.extend(std::env::split_paths(&p));
            std::env::join_paths(dirs).expect("PATH")
        }
        None => bin_dir.as_os_str().to_owned(),
    };
    let child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(work_dir)
        .env("PATH", path)
        .env_remove("KAFKA_BOOTSTRAP")
        .env_remove("WEIR_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("spawning sh: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(COMMAND_TIMEOUT) {
        Ok(output) => output.map_err(|e| format!("waiting for sh: {e}"))?,
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            return Err(format!("still running after {COMMAND_TIMEOUT:?}; killed"));
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "exit {}\n  stdout: {}\n  stderr: {}",
            output.status,
            stdout.trim_end(),
            stderr.trim_end()
        ))
    }
}

#[test]
fn extraction_finds_shell_lines_only() {
    let md = "text weir x\n```sh\n$ weir topics list -b h\nprintf 'a\\n' | weir produce -t t \\\n  -b h\ncargo test\n```\n```rust\nweir not_shell();\n```\n";
    let lines: Vec<String> = weir_lines(Path::new("x.md"), md)
        .into_iter()
        .map(|l| l.text)
        .collect();
    assert_eq!(
        lines,
        [
            "weir topics list -b h",
            "printf 'a\\n' | weir produce -t t -b h"
        ]
    );
    assert_eq!(
        runnable(
            "cargo run --release -p weir-cli --bin weir -- --help",
            "h",
            Path::new("/s")
        ),
        "weir --help"
    );
}

#[test]
fn every_documented_weir_command_runs_against_the_testkit() {
    let root = repo_root();
    let mut lines = Vec::new();
    for file in doc_files(&root) {
        let text = std::fs::read_to_string(&file).expect("read doc");
        lines.extend(weir_lines(&file, &text));
    }
    for (excluded, reason) in EXCLUDED {
        assert!(
            lines.iter().any(|l| l.text == *excluded),
            "excluded line {excluded:?} ({reason}) is no longer in the docs"
        );
    }
    lines.retain(|l| !EXCLUDED.iter().any(|(e, _)| l.text == *e));
    // Guard the extractor itself: the user guide's command-line page.
    assert!(
        lines.len() >= 8,
        "found only {} weir lines: {lines:#?}",
        lines.len()
    );
    assert!(
        lines
            .iter()
            .any(|l| l.text.starts_with("weir groups describe")),
        "{lines:#?}"
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = runtime
        .block_on(Cluster::builder().build())
        .expect("testkit cluster");
    let bootstrap = cluster.bootstrap();

    let work = tempfile::tempdir().expect("work dir");
    std::fs::write(work.path().join("lines.txt"), "k3:v3\nk4:v4\n").expect("lines.txt");
    let state_dir = work.path().join("state");
    make_task_store(&state_dir.join(DOCUMENTED_TASK));

    let weir = PathBuf::from(env!("CARGO_BIN_EXE_weir"));
    let mut failures = Vec::new();
    for line in &lines {
        let script = runnable(&line.text, &bootstrap, &state_dir);
        let shown = format!(
            "{}:{}: {}",
            line.file
                .strip_prefix(&root)
                .unwrap_or(&line.file)
                .display(),
            line.line,
            line.text
        );
        match run_line(&script, &weir, work.path()) {
            Ok(stdout) => eprintln!("ok   {shown}\n{}", stdout.trim_end()),
            Err(why) => {
                eprintln!("FAIL {shown}\n  {why}");
                failures.push(format!("{shown}\n  {why}"));
            }
        }
    }
    drop(cluster);
    assert!(
        failures.is_empty(),
        "{} of {} documented weir lines failed:\n{}",
        failures.len(),
        lines.len(),
        failures.join("\n")
    );
}
