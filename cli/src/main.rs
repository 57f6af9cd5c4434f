//! `weir`: a kcat-like command-line tool over weir-client.
//!
//! Every command exits 0 on success. Otherwise it prints one line,
//! `weir: error: …`, and exits non-zero: 2 for bad arguments (clap's own
//! convention), 1 for everything else (an unreachable broker, an unknown topic).

mod app_cmd;
mod args;
mod connect;
mod consume;
mod demo;
mod format;
mod groups_cmd;
mod offsets;
mod perf;
mod produce;
mod shutdown;
mod store_cmd;
mod topics;
mod txn_produce;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command, ConnectArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo crashes an instance on purpose: its connections are closed by
    // the embedded cluster only when the demo ends, which is not worth a warning.
    let default_filter = match cli.command {
        Command::Demo(_) => "warn,weir_client::connection::messenger=error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Store { command } => store_cmd::run(command),
        command => run_async(command, &cli.connect),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("weir: error: {}", message.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn run_async(command: Command, connect: &ConnectArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    runtime.block_on(async move {
        shutdown::install()?;
        match command {
            // These close their clients themselves on SIGINT or SIGTERM.
            Command::Produce(args) => produce::run(args, connect).await,
            Command::Consume(args) => consume::run(args, connect).await,
            command => {
                tokio::select! {
                    result = run_command(command, connect) => result,
                    signal = shutdown::requested() => Err(format!("interrupted by {signal}")),
                }
            }
        }
    })
}

/// The commands that do not watch for signals themselves: on SIGINT or
/// SIGTERM they end where they are (a `perf` run with it, without its summary).
async fn run_command(command: Command, connect: &ConnectArgs) -> Result<(), String> {
    match command {
        Command::Topics { command } => topics::run(command, connect).await,
        Command::Offsets(args) => offsets::run(args, connect).await,
        Command::Groups { command } => groups_cmd::run(connect, command).await,
        Command::App { command } => app_cmd::run(connect, command).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Produce(args) => produce::run(args, connect).await,
        Command::Consume(args) => consume::run(args, connect).await,
        Command::Perf { command } => perf::run(command, connect).await,
        Command::Store { .. } => Err("store commands run without the async runtime".into()),
    }
}
