//! Page views per user per minute (hopping windows, final results only), a
//! weir-streams DSL application.
//!
//! ```text
//! pageviews run --bootstrap HOST:PORT --application-id ID --state-dir DIR --input TOPIC --output TOPIC
//!               [--guarantee at-least-once|exactly-once] [--threads N] [--standbys N]
//!               [--instance-id ID] [-X key=value]...
//! pageviews check
//! ```
//!
//! `run` reads views (key = user, value = page) and writes each closed
//! window's count: key = user + window start in Kafka Streams' windowed
//! format, value = a big-endian long. `check` runs it on an embedded cluster
//! under exactly-once with one instance crashing mid-run, and checks that
//! every closed window's count comes out once and right.

mod apps;
mod cli;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use cli::embedded::{Embedded, Input, compare, run_check, wait_for};
use weir_streams::dsl::Windowed;
use weir_streams::serde::Serde;

/// Page views per user per minute.
#[derive(Debug, Parser)]
#[command(name = "pageviews", version)]
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

const USERS: usize = 12;
const VIEWS: usize = 1_200;

async fn check() -> Result<String, String> {
    let (input, output) = ("page-views", "views-per-minute");
    let kit = Embedded::start("pageviews", &[input, output], 4).await?;
    let size = apps::pageviews::SIZE.as_millis() as i64;
    let advance = apps::pageviews::ADVANCE.as_millis() as i64;
    // A view every 500 ms for 10 minutes, users in a fixed shuffle.
    let views: Vec<Input> = (0..VIEWS)
        .map(|i| {
            let user = (i * 7 + i / 5) % USERS;
            (
                format!("user-{user}"),
                Some(format!("/page/{}", i % 9)),
                1_000 + i as i64 * 500,
            )
        })
        .collect();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for (user, _, ts) in &views {
        let mut start = (ts - size + advance).max(0) / advance * advance;
        while start <= *ts {
            *expected.entry(format!("{user}@{start}")).or_default() += 1;
            start += advance;
        }
    }
    // One view per user ten minutes later closes every earlier window.
    let last = views.iter().map(|v| v.2).max().unwrap_or(0);
    let closers: Vec<Input> = (0..USERS)
        .map(|u| (format!("user-{u}"), Some("/".into()), last + 600_000))
        .collect();
    let topology = || apps::pageviews::topology(input, output).map_err(|e| e.to_string());
    let (head, tail) = views.split_at(VIEWS / 2);
    kit.produce(input, head).await?;
    let a = kit.instance("a", topology()?).await?;
    let b = kit.instance("b", topology()?).await?;
    wait_for("the first final counts", || async {
        Ok(kit.read_committed(output).await?.len() > 20)
    })
    .await?;
    kit.produce(input, tail).await?;
    kit.crash("a", a).await?;
    let c = kit.instance("c", topology()?).await?;
    kit.produce(input, &closers).await?;
    let decode = |records: Vec<(Vec<u8>, Vec<u8>)>| -> Result<Vec<(String, i64)>, String> {
        records
            .into_iter()
            .map(|(k, v)| {
                let w = Windowed::<String>::deserialize(Some(&k)).map_err(|e| e.to_string())?;
                let n = i64::deserialize(Some(&v)).map_err(|e| e.to_string())?;
                Ok((format!("{}@{}", w.key, w.window.start), n))
            })
            .collect()
    };
    wait_for("every closed window", || async {
        Ok(kit.read_committed_raw(output).await?.len() >= expected.len())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut got = BTreeMap::new();
    for (window, n) in decode(kit.read_committed_raw(output).await?)? {
        if got.insert(window.clone(), n).is_some() {
            return Err(format!("window {window} came out twice"));
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
        "{VIEWS} views, {} closed windows, each final count once and exact across a crash",
        expected.len()
    ))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Run { common } => {
            cli::init_logs();
            let topology = apps::pageviews::topology(&common.input, &common.output);
            cli::run("pageviews", topology, common.config(), common.metrics_addr)
        }
        Command::Check => {
            // A crash is part of the check: its connection warnings are noise.
            cli::init_logs_at("error");
            run_check("pageviews", check)
        }
    }
}
