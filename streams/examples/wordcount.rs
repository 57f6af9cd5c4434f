//! A stateful word count on Kafka with weir-streams.
//!
//! ```text
//! wordcount --bootstrap HOST:PORT --application-id ID --state-dir DIR --input TOPIC --output TOPIC
//!           [--guarantee at-least-once|exactly-once] [--threads N] [--standbys N]
//!           [--instance-id ID] [--metrics-addr HOST:PORT] [-X key=value]...
//! ```
//!
//! Reads text lines (record values), splits them on whitespace, lowercases,
//! repartitions by word, counts in a persistent key-value store and writes,
//! per input word, key = the word, value = its new count in decimal, with the
//! input record's timestamp. SIGTERM or SIGINT closes gracefully (exit 0).

mod apps;
mod cli;

use std::process::ExitCode;

use clap::Parser;

/// A stateful word count on Kafka.
#[derive(Debug, Parser)]
#[command(name = "wordcount", version)]
struct Args {
    #[command(flatten)]
    common: cli::Common,
}

fn main() -> ExitCode {
    let args = Args::parse();
    cli::init_logs();
    let topology = apps::wordcount::topology(&args.common.input, &args.common.output);
    cli::run(
        "wordcount",
        topology,
        args.common.config(),
        args.common.metrics_addr,
    )
}
