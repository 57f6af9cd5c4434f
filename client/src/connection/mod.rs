//! Connections to brokers.
//!
//! [`Messenger`] is one connection; [`connect`] dials an address (over TCP,
//! or through a [`Dialer`]), wraps it in TLS if configured, and runs the
//! [`handshake`] (ApiVersions, then SASL).

mod dial;
pub mod handshake;
mod messenger;
pub mod scram;
pub mod throttle;
pub mod tls;

use std::time::Duration;

use tokio::net::TcpStream;

pub use dial::{BoxedStream, ByteStream, Dial, DialFuture, Dialer};
pub use handshake::{SaslConfig, SaslMechanism};
pub use messenger::{Messenger, MessengerOptions, PendingResponse, version_cap};
pub use throttle::{Throttle, ThrottleTime};
pub use tls::TlsConfig;

use crate::{ClientError, Result};

/// Everything needed to open a connection.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// How the connection behaves once open.
    pub messenger: MessengerOptions,
    /// How long dialling, TLS and the handshake may take together.
    pub connect_timeout: Option<Duration>,
    /// TLS, if the listener speaks it.
    pub tls: Option<TlsConfig>,
    /// SASL credentials, if the listener wants them.
    pub sasl: Option<SaslConfig>,
    /// Opens the byte stream in place of TCP (in-memory tests); TLS and SASL
    /// still run over what it returns.
    pub dialer: Option<Dialer>,
}

/// The host part of `host:port` (brackets of an IPv6 literal removed).
pub fn host_of(addr: &str) -> &str {
    let host = match addr.rfind(':') {
        Some(i) if !addr[..i].ends_with(':') => &addr[..i],
        _ => addr,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Dials `addr` (`host:port`), sets up TLS and SASL as configured, and
/// learns the broker's API versions.
///
/// # Errors
/// [`ClientError::Io`] naming `addr` if dialling fails (over TCP or through
/// the [`Dialer`]), [`ClientError::RequestTimeout`]
/// (for ApiVersions) if it all takes longer than the connect timeout,
/// [`ClientError::Tls`] or [`ClientError::Sasl`].
pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Messenger> {
    let work = connect_inner(addr, options);
    match options.connect_timeout {
        None => work.await,
        Some(limit) => tokio::time::timeout(limit, work)
            .await
            .map_err(|_| ClientError::Io {
                broker: addr.to_owned(),
                context: "connecting",
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {limit:?}"),
                ),
            })?,
    }
}

async fn connect_inner(addr: &str, options: &ConnectOptions) -> Result<Messenger> {
    let dial_error = |source| ClientError::Io {
        broker: addr.to_owned(),
        context: "connecting",
        source,
    };
    let stream: BoxedStream = match &options.dialer {
        Some(dialer) => dialer.dial(addr).await.map_err(dial_error)?,
        None => {
            let tcp = TcpStream::connect(addr).await.map_err(dial_error)?;
            // Requests are small and latency matters more than packet count.
            let _ = tcp.set_nodelay(true);
            Box::new(tcp)
        }
    };
    let mut messenger = match &options.tls {
        Some(tls) => {
            let stream = tls.wrap(host_of(addr), addr, stream).await?;
            Messenger::start(stream, addr, options.messenger.clone())
        }
        None => Messenger::start(stream, addr, options.messenger.clone()),
    };
    handshake::negotiate_versions(&mut messenger).await?;
    let session = match &options.sasl {
        Some(sasl) => handshake::authenticate(&messenger, sasl).await?,
        None => None,
    };
    if let Some(lifetime) = session {
        // The broker closes the connection when the session ends (KIP-368).
        // Rather than re-authenticate in place, retire the connection a
        // little early; the pool then dials a fresh one.
        messenger.set_expiry(tokio::time::Instant::now() + lifetime.mul_f64(0.85));
    }
    tracing::debug!(
        broker = addr,
        tls = options.tls.is_some(),
        dialer = options.dialer.is_some(),
        "connected"
    );
    Ok(messenger)
}

#[cfg(test)]
mod tests;
