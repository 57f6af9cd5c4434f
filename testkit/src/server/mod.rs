//! The transport: TCP listeners (one per broker) and in-memory duplex
//! connections, both served by the same per-connection loop.

mod connection;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::warn;

pub(crate) use connection::serve;

use crate::cluster::task::Shared;

/// A task that is aborted when this handle is dropped, so that a dropped
/// cluster or a killed broker stops listening at once.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Accepts connections for one broker until aborted.
pub(crate) fn spawn_listener(
    listener: TcpListener,
    broker: i32,
    shared: Arc<Shared>,
) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    // Kafka clients send small requests and wait for each answer.
                    if let Err(e) = stream.set_nodelay(true) {
                        warn!(%peer, error = %e, "set_nodelay failed");
                    }
                    tokio::spawn(serve(stream, broker, shared.clone()));
                }
                Err(e) => {
                    // Out of file descriptors, usually: back off instead of spinning.
                    warn!(broker, error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }))
}
