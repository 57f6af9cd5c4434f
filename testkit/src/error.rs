//! The one error type of the testkit's public API.

use weir_protocol::ProtocolError;

/// The result type of this crate.
pub type Result<T, E = TestkitError> = std::result::Result<T, E>;

/// What can go wrong when starting or driving a test cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The cluster's state task is gone (the cluster was dropped or shut down).
    #[error("the cluster has shut down")]
    ClusterStopped,
    /// No broker has this id.
    #[error("no broker with id {0}")]
    UnknownBroker(i32),
    /// No topic has this name, or the topic has no such partition.
    #[error("unknown topic or partition {topic}-{partition}")]
    UnknownTopicOrPartition {
        /// The topic.
        topic: String,
        /// The partition, or -1 when the topic itself is unknown.
        partition: i32,
    },
    /// The cluster refused an administrative operation with a Kafka error code.
    #[error("{operation} failed with Kafka error code {code}: {message}")]
    Kafka {
        /// What was attempted.
        operation: String,
        /// The Kafka error code.
        code: i16,
        /// Details.
        message: String,
    },
    /// Something the cluster was waited on for did not happen in time.
    #[error("{what} did not happen within {waited:?}")]
    TimedOut {
        /// What was waited for.
        what: String,
        /// How long (tokio's clock).
        waited: std::time::Duration,
    },
    /// A protocol-level encoding or decoding error.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

impl TestkitError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
