//! A command deduplicator on Kafka with weir-streams: the application of the
//! second user report (an aborted transaction's put must never stay in the
//! store).
//!
//! ```text
//! dedup --bootstrap HOST:PORT --application-id ID --state-dir DIR --input TOPIC --output TOPIC
//!       [--guarantee at-least-once|exactly-once] [--threads N] [--standbys N]
//!       [--instance-id ID] [--metrics-addr HOST:PORT] [-X key=value]... [--window-ms MS] [--fail-marker TEXT]
//! ```
//!
//! Input key = command id, value = payload. Output key = command id, value
//! `accepted` (first time within the window) or `duplicate`. A payload
//! holding `--fail-marker` makes the second processor fail once per process
//! and command id, after the first processor stored the id: the failure
//! aborts the commit, the thread restarts from its last commit, and the
//! command is then accepted, not taken for its own duplicate.

mod apps;
mod cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

/// A command deduplicator on Kafka.
#[derive(Debug, Parser)]
#[command(name = "dedup", version)]
struct Args {
    #[command(flatten)]
    common: cli::Common,
    /// How long a command id is remembered, in milliseconds.
    #[arg(long, default_value_t = 3_600_000)]
    window_ms: u64,
    /// Fail once per process on a command whose payload holds this text.
    #[arg(long)]
    fail_marker: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    cli::init_logs();
    let topology = apps::dedup::topology(
        &args.common.input,
        &args.common.output,
        Duration::from_millis(args.window_ms),
        args.fail_marker.clone(),
        apps::dedup::FailedOnce::default(),
    );
    cli::run(
        "dedup",
        topology,
        args.common.config(),
        args.common.metrics_addr,
    )
}
