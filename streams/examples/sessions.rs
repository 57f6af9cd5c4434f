//! A session activity report (session windows, final results only), a
//! weir-streams DSL application.
//!
//! ```text
//! sessions run --bootstrap HOST:PORT --application-id ID --state-dir DIR --input TOPIC --output TOPIC
//!              [--guarantee at-least-once|exactly-once] [--threads N] [--standbys N]
//!              [--instance-id ID] [-X key=value]...
//! sessions check
//! ```
//!
//! `run` reads actions (key = user) and writes each finished session's
//! action count: key = user + session end + start in Kafka Streams'
//! session-windowed format, value = a big-endian long. `check` runs it on an
//! embedded cluster under exactly-once with one instance crashing mid-run,
//! and checks that every session comes out once with its exact count.

mod apps;
mod cli;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use cli::embedded::{Embedded, Input, compare, run_check, wait_for};
use weir_streams::dsl::SessionWindowed;
use weir_streams::serde::Serde;

/// Session activity per user.
#[derive(Debug, Parser)]
#[command(name = "sessions", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the application against a cluster.
    Run {
        #[command(flatten)]
        common: Box<cli::Common>,
    },
    /// Run it on an embedded cluster with a crash, and check the result.
    Check,
}

const USERS: usize = 10;

async fn check() -> Result<String, String> {
    let (input, output) = ("user-actions", "activity-sessions");
    let kit = Embedded::start("sessions", &[input, output], 4).await?;
    let gap = apps::sessions::GAP.as_millis() as i64;
    // Each user: bursts of actions 10 s apart, bursts separated by more than
    // the gap; in time order across users.
    let mut actions: Vec<Input> = Vec::new();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for user in 0..USERS {
        let mut t = 1_000 + user as i64 * 7_000;
        for burst in 0..(3 + user % 3) {
            let n = 2 + (user * 5 + burst * 3) % 7;
            let start = t;
            for _ in 0..n {
                actions.push((format!("user-{user}"), Some("click".into()), t));
                t += 10_000;
            }
            let end = t - 10_000;
            expected.insert(format!("user-{user}@{start}-{end}"), n as i64);
            t = end + gap + 60_000;
        }
    }
    actions.sort_by_key(|a| a.2);
    let last = actions.iter().map(|a| a.2).max().unwrap_or(0);
    let closers: Vec<Input> = (0..USERS)
        .map(|u| (format!("user-{u}"), Some("login".into()), last + 10 * gap))
        .collect();
    let topology = || apps::sessions::topology(input, output).map_err(|e| e.to_string());
    let (head, tail) = actions.split_at(actions.len() / 2);
    kit.produce(input, head).await?;
    let a = kit.instance("a", topology()?).await?;
    let b = kit.instance("b", topology()?).await?;
    wait_for("the first sessions", || async {
        Ok(kit.read_committed(output).await?.len() >= 3)
    })
    .await?;
    kit.produce(input, tail).await?;
    kit.crash("a", a).await?;
    let c = kit.instance("c", topology()?).await?;
    kit.produce(input, &closers).await?;
    wait_for("every session", || async {
        Ok(kit.read_committed_raw(output).await?.len() >= expected.len())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut got = BTreeMap::new();
    for (k, v) in kit.read_committed_raw(output).await? {
        let s = SessionWindowed::<String>::deserialize(Some(&k)).map_err(|e| e.to_string())?;
        let n = i64::deserialize(Some(&v)).map_err(|e| e.to_string())?;
        let id = format!("{}@{}-{}", s.key, s.window.start, s.window.end);
        if got.insert(id.clone(), n).is_some() {
            return Err(format!("session {id} came out twice"));
        }
    }
    compare(&got, &expected)?;
    b.close(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    c.close(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "{} actions, {} sessions, each final count once and exact across a crash",
        actions.len(),
        expected.len()
    ))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Run { common } => {
            cli::init_logs();
            let topology = apps::sessions::topology(&common.input, &common.output);
            cli::run("sessions", topology, common.config(), common.metrics_addr)
        }
        Command::Check => {
            // A crash is part of the check: its connection warnings are noise.
            cli::init_logs_at("error");
            run_check("sessions", check)
        }
    }
}
