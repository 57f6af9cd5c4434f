//! How a connection's byte stream is opened.
//!
//! By default the client dials TCP. A [`Dialer`] replaces that for every
//! address the client connects to (bootstrap servers and the brokers the
//! metadata names); TLS and SASL are still layered on top of the stream it
//! returns. Tests use one to run the client in memory against an
//! in-process cluster, where tokio's paused clock is exact: a real socket
//! lets the clock jump ahead while the socket is idle.
//!
//! ```
//! use std::io;
//! use weir_client::config::ClientConfig;
//! use weir_client::connection::{BoxedStream, Dial, DialFuture, Dialer};
//!
//! /// Answers every address with an in-memory pipe nobody serves.
//! struct Nowhere;
//!
//! impl Dial for Nowhere {
//!     fn dial<'a>(&'a self, _addr: &'a str) -> DialFuture<'a> {
//!         Box::pin(async {
//!             let (client, _server) = tokio::io::duplex(1024);
//!             Ok(Box::new(client) as BoxedStream)
//!         })
//!     }
//! }
//!
//! let config = ClientConfig::builder()
//!     .bootstrap_servers(["broker-0:9092"])
//!     .dialer(Dialer::new(Nowhere))
//!     .build()?;
//! assert!(config.dialer.is_some());
//! # Ok::<(), weir_client::ClientError>(())
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream a connection can run over.
pub trait ByteStream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> ByteStream for T {}

/// The stream a [`Dial`] returns.
pub type BoxedStream = Box<dyn ByteStream>;

/// The future a [`Dial`] returns.
pub type DialFuture<'a> = Pin<Box<dyn Future<Output = io::Result<BoxedStream>> + Send + 'a>>;

/// Opens a byte stream to `host:port`, in place of `TcpStream::connect`.
pub trait Dial: Send + Sync {
    /// Opens a stream to `addr`, as given in `bootstrap.servers` or
    /// advertised in the metadata.
    ///
    /// # Errors
    /// Any I/O error; the client reports it as
    /// [`ClientError::Io`](crate::ClientError::Io) naming `addr`.
    fn dial<'a>(&'a self, addr: &'a str) -> DialFuture<'a>;
}

/// A shared [`Dial`], as [`ConnectOptions`](super::ConnectOptions) and
/// [`ClientConfig`](crate::config::ClientConfig) hold it.
#[derive(Clone)]
pub struct Dialer(Arc<dyn Dial>);

impl Dialer {
    /// Wraps a dial implementation.
    pub fn new(dial: impl Dial + 'static) -> Self {
        Self(Arc::new(dial))
    }

    /// Opens a stream to `addr`.
    ///
    /// # Errors
    /// The dial implementation's I/O error.
    pub async fn dial(&self, addr: &str) -> io::Result<BoxedStream> {
        self.0.dial(addr).await
    }
}

impl fmt::Debug for Dialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Dialer(custom)")
    }
}
