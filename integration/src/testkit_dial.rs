//! Weir clients connected to an in-process [`weir_testkit::Cluster`] in
//! memory, so tests run on tokio's paused clock and are deterministic.
//!
//! The testkit advertises each broker as `127.0.0.1:<port>` (the port of
//! its TCP listener, which stays unused here). [`TestkitDialer`] maps such
//! an address back to the broker id and opens
//! [`Cluster::connect_duplex`](weir_testkit::Cluster::connect_duplex) to
//! it instead of a socket. This module lives here, not in the testkit,
//! because the testkit depends on nothing but the protocol crate; client,
//! group and integration tests all use this one copy.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::sync::Arc;
//! use weir_integration::testkit_dial::client_config;
//!
//! let kit = Arc::new(weir_testkit::Cluster::builder().brokers(2).build().await.unwrap());
//! let config = client_config(&kit, "app").build().unwrap();
//! let cluster = weir_client::Cluster::connect(config).await.unwrap();
//! assert_eq!(cluster.metadata(&[]).await.unwrap().brokers.len(), 2);
//! # }
//! ```

use std::io;
use std::sync::Arc;

use weir_client::config::{ClientConfig, ClientConfigBuilder};
use weir_client::connection::{BoxedStream, Dial, DialFuture, Dialer};

/// Dials the brokers of one in-process cluster over in-memory streams.
#[derive(Debug, Clone)]
pub struct TestkitDialer {
    kit: Arc<weir_testkit::Cluster>,
}

impl TestkitDialer {
    /// A dialer for `kit`'s brokers.
    pub fn new(kit: Arc<weir_testkit::Cluster>) -> Self {
        Self { kit }
    }

    /// This dialer as a client's [`Dialer`].
    pub fn into_dialer(self) -> Dialer {
        Dialer::new(self)
    }

    /// The id of the broker advertised at `addr`, if it is one of `kit`'s.
    pub fn broker_at(&self, addr: &str) -> Option<i32> {
        (0..)
            .map_while(|id| self.kit.broker_addr(id).map(|a| (id, a)))
            .find(|(_, a)| a.to_string() == addr)
            .map(|(id, _)| id)
    }
}

impl Dial for TestkitDialer {
    fn dial<'a>(&'a self, addr: &'a str) -> DialFuture<'a> {
        Box::pin(async move {
            let broker = self.broker_at(addr).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no broker of the in-process cluster is advertised at {addr}"),
                )
            })?;
            // A killed broker refuses, as its closed TCP listener would.
            let stream = self.kit.connect_duplex(broker).await.map_err(|e| {
                io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("broker {broker}: {e}"),
                )
            })?;
            Ok(Box::new(stream) as BoxedStream)
        })
    }
}

/// A client configuration for `kit`: its bootstrap servers, `client_id`,
/// the in-memory dialer, and short retry backoffs (they are virtual time
/// on a paused clock, but keep the request count low).
pub fn client_config(kit: &Arc<weir_testkit::Cluster>, client_id: &str) -> ClientConfigBuilder {
    ClientConfig::builder()
        .bootstrap_servers(kit.bootstrap().split(','))
        .client_id(client_id)
        .retry_backoff(
            std::time::Duration::from_millis(10),
            std::time::Duration::from_millis(50),
        )
        .dialer(TestkitDialer::new(Arc::clone(kit)).into_dialer())
}
