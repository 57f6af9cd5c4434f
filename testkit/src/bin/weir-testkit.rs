//! `weir-testkit serve`: the testkit cluster as a standalone Kafka broker,
//! for the quickstart and for clients in other languages.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use weir_testkit::Cluster;

#[derive(Parser)]
#[command(
    name = "weir-testkit",
    version,
    about = "An in-process Kafka cluster speaking the real wire protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a cluster on 127.0.0.1 until interrupted.
    Serve {
        /// Port of broker 0; broker i listens on port + i. 0 picks free ports.
        #[arg(long, default_value_t = 9092)]
        port: u16,
        /// Number of brokers.
        #[arg(long, default_value_t = 1)]
        brokers: i32,
        /// Partitions of auto-created topics.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Do not create unknown topics on Metadata requests.
        #[arg(long)]
        no_auto_create: bool,
        /// group.initial.rebalance.delay.ms (Kafka's default: 3000).
        #[arg(long, default_value_t = 3000)]
        initial_rebalance_delay_ms: u64,
        /// The finalized transaction.version: 2 as Kafka 4.x (KIP-890), 1, or 0 as Kafka 3.x.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(i16).range(0..=2))]
        transaction_version: i16,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let Command::Serve {
        port,
        brokers,
        partitions,
        no_auto_create,
        initial_rebalance_delay_ms,
        transaction_version,
    } = Cli::parse().command;
    let built = Cluster::builder()
        .brokers(brokers)
        .port(port)
        .default_partitions(partitions)
        .auto_create_topics(!no_auto_create)
        .group_initial_rebalance_delay(Duration::from_millis(initial_rebalance_delay_ms))
        .transaction_version(transaction_version)
        .build()
        .await;
    let cluster = match built {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir-testkit: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Scripts wait for this line (the bootstrap servers) before connecting.
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{}", cluster.bootstrap());
    let _ = stdout.flush();
    // A long-running broker should not keep every request body forever.
    let _ = cluster
        .with_state(|s| s.faults.set_log_capacity(1000))
        .await;
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("weir-testkit: waiting for Ctrl-C: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
