//! The command line the example applications share, and their run loop:
//! start, run until SIGTERM or SIGINT, close gracefully, exit 0; one clear
//! line on stderr and a non-zero exit when something is wrong.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use weir_streams::{KafkaStreams, State, StreamsConfig, Topology};

pub mod embedded;

/// The processing guarantee, as the command line spells it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Guarantee {
    /// `processing.guarantee=at_least_once` (the default).
    AtLeastOnce,
    /// `processing.guarantee=exactly_once_v2`.
    ExactlyOnce,
}

/// The flags every example takes.
#[derive(Debug, Args)]
pub struct Common {
    /// The cluster's bootstrap servers, HOST:PORT[,HOST:PORT...].
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    pub bootstrap: String,
    /// `application.id`: the consumer group and the prefix of internal topics.
    #[arg(long)]
    pub application_id: String,
    /// `state.dir`: where the task stores live.
    #[arg(long)]
    pub state_dir: PathBuf,
    /// The input topic.
    #[arg(long)]
    pub input: String,
    /// The output topic.
    #[arg(long)]
    pub output: String,
    /// The processing guarantee.
    #[arg(long, value_enum, default_value = "at-least-once")]
    pub guarantee: Guarantee,
    /// `num.stream.threads`.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// `num.standby.replicas`.
    #[arg(long, default_value_t = 0)]
    pub standbys: usize,
    /// `group.instance.id` (static membership); also from `$WEIR_INSTANCE_ID`.
    #[arg(long, env = "WEIR_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Use the host name as `group.instance.id` when no instance id is given
    /// (a StatefulSet pod's name), so a restarted pod keeps its tasks.
    #[arg(long)]
    pub instance_id_from_hostname: bool,
    /// Any Streams or client property, KEY=VALUE (repeatable).
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = key_value)]
    pub properties: Vec<(String, String)>,
    /// Serve the instance's metrics (task lags, restore progress, records
    /// processed, commits...) for Prometheus at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

impl Common {
    /// The Streams config these flags give.
    ///
    /// # Errors
    ///
    /// An unknown property or a bad value, naming it.
    pub fn config(&self) -> weir_streams::Result<StreamsConfig> {
        let threads = self.threads.to_string();
        let standbys = self.standbys.to_string();
        let state_dir = self.state_dir.display().to_string();
        let guarantee = match self.guarantee {
            Guarantee::AtLeastOnce => "at_least_once",
            Guarantee::ExactlyOnce => "exactly_once_v2",
        };
        let mut props: Vec<(&str, &str)> = vec![
            ("application.id", &self.application_id),
            ("bootstrap.servers", &self.bootstrap),
            ("state.dir", &state_dir),
            ("processing.guarantee", guarantee),
            ("num.stream.threads", &threads),
        ];
        if self.standbys > 0 {
            props.push(("num.standby.replicas", &standbys));
        }
        let from_host = if self.instance_id.is_none() && self.instance_id_from_hostname {
            weir_streams::config::machine_instance_id()
        } else {
            None
        };
        if let Some(id) = self.instance_id.as_ref().or(from_host.as_ref()) {
            props.push(("group.instance.id", id));
        }
        props.extend(
            self.properties
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        StreamsConfig::from_properties(&props)
    }
}

/// Logs to stderr, `RUST_LOG` or `info`.
pub fn init_logs() {
    init_logs_at("info");
}

/// Logs to stderr, `RUST_LOG` or `default`.
pub fn init_logs_at(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Installs a Prometheus recorder for the `metrics` facade and serves its
/// text format at `http://addr/metrics` (any path answers the same).
async fn serve_metrics(addr: std::net::SocketAddr) -> std::io::Result<std::net::SocketAddr> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(std::io::Error::other)?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                continue;
            };
            let body = handle.render();
            tokio::spawn(async move {
                // One request per connection: read its head, answer, close.
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    Ok(bound)
}

/// Runs `topology` until SIGTERM or SIGINT, then closes gracefully; with
/// `metrics_addr`, serves its metrics for Prometheus meanwhile.
pub fn run(
    name: &str,
    topology: weir_streams::Result<Topology>,
    config: weir_streams::Result<StreamsConfig>,
    metrics_addr: Option<std::net::SocketAddr>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async {
        let (topology, config) = match (topology, config) {
            (Ok(t), Ok(c)) => (t, c),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("{name}: {e}");
                return ExitCode::from(2);
            }
        };
        if let Some(addr) = metrics_addr {
            match serve_metrics(addr).await {
                Ok(bound) => tracing::info!(%bound, "serving metrics at http://{bound}/metrics"),
                Err(e) => {
                    eprintln!("{name}: cannot serve metrics on {addr}: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        let streams = match KafkaStreams::start(topology, config).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::from(1);
            }
        };
        let stopped = wait_stopped(&streams);
        let outcome = tokio::select! {
            signal = shutdown_signal() => {
                if let Err(e) = signal {
                    eprintln!("{name}: cannot listen for signals: {e}");
                }
                tracing::info!("signal received: closing");
                None
            }
            state = stopped => Some(state),
        };
        let closed = streams.close(Duration::from_secs(60)).await;
        match (outcome, closed) {
            (None, Ok(())) => ExitCode::SUCCESS,
            (Some(state), Ok(())) => {
                eprintln!("{name}: the instance stopped on its own ({state:?})");
                ExitCode::from(1)
            }
            (_, Err(e)) => {
                eprintln!("{name}: {e}");
                ExitCode::from(1)
            }
        }
    })
}

async fn wait_stopped(streams: &KafkaStreams) -> State {
    let mut states = streams.state_listener();
    loop {
        let state = *states.borrow_and_update();
        if matches!(state, State::Error | State::NotRunning) {
            return state;
        }
        if states.changed().await.is_err() {
            return State::NotRunning;
        }
    }
}

async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => Ok(()),
            r = tokio::signal::ctrl_c() => r,
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}
