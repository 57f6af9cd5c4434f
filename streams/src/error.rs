//! The crate's errors.

use std::fmt;

/// Errors of weir-streams.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamsError {
    /// The topology is not valid; the message names the node, store or topic.
    #[error("invalid topology: {0}")]
    InvalidTopology(String),
    /// A configuration property is unknown or its value is invalid.
    #[error("invalid config {property}: {reason}")]
    InvalidConfig {
        /// The property, by its Kafka Streams name.
        property: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A topic the application needs is missing or does not match.
    #[error("topic {topic}: {reason}")]
    Topic {
        /// The topic.
        topic: String,
        /// What is wrong.
        reason: String,
    },
    /// A record could not be (de)serialized.
    #[error(transparent)]
    Serde(#[from] SerdeError),
    /// A processor failed.
    #[error("task {task}: processor {node}: {source}")]
    Process {
        /// The task, as `subtopology_partition`.
        task: String,
        /// The processor node.
        node: String,
        /// The processor's error.
        source: ProcessError,
    },
    /// A state store operation failed.
    #[error("store {store}: {source}")]
    Store {
        /// The store.
        store: String,
        /// The store error.
        source: Box<weir_store::StoreError>,
    },
    /// A Kafka client operation failed.
    #[error("{context}: {source}")]
    Client {
        /// What the runtime was doing.
        context: String,
        /// The client error.
        source: Box<weir_client::ClientError>,
    },
    /// A group membership operation failed.
    #[error("{context}: {source}")]
    Group {
        /// What the runtime was doing.
        context: String,
        /// The group error.
        source: Box<weir_group::GroupError>,
    },
    /// The task's ownership ended (lost, fenced or revoked) before the operation finished.
    #[error("task {task} migrated: {reason}")]
    TaskMigrated {
        /// The task.
        task: String,
        /// Why the runtime considers the task no longer owned.
        reason: String,
    },
    /// The instance is not running (closed, or stopped after an error).
    #[error("the streams instance is not running: {0}")]
    NotRunning(String),
}

impl StreamsError {
    /// A client error while doing `context`.
    pub fn client(context: impl Into<String>, source: weir_client::ClientError) -> Self {
        StreamsError::Client {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// A store error of `store`.
    pub fn store(store: impl Into<String>, source: weir_store::StoreError) -> Self {
        StreamsError::Store {
            store: store.into(),
            source: Box::new(source),
        }
    }

    /// A group error while doing `context`.
    pub fn group(context: impl Into<String>, source: weir_group::GroupError) -> Self {
        StreamsError::Group {
            context: context.into(),
            source: Box::new(source),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = StreamsError> = std::result::Result<T, E>;

/// A record's bytes do not decode as the serde expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{serde}: {reason}")]
pub struct SerdeError {
    /// The serde (type) that refused the bytes.
    pub serde: &'static str,
    /// Why.
    pub reason: String,
}

impl SerdeError {
    /// A new error for `serde`.
    pub fn new(serde: &'static str, reason: impl Into<String>) -> Self {
        SerdeError {
            serde,
            reason: reason.into(),
        }
    }
}

/// The error a processor returns: it aborts the current transaction (or the
/// tasks' uncommitted work under at-least-once), and the processing-error
/// handler decides what happens next.
#[derive(Debug)]
pub struct ProcessError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ProcessError {
    /// An error with a message.
    pub fn msg(message: impl Into<String>) -> Self {
        ProcessError {
            message: message.into(),
            source: None,
        }
    }

    /// An error caused by `source`.
    pub fn from_error(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ProcessError {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{}: {source}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ProcessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<weir_store::StoreError> for ProcessError {
    fn from(e: weir_store::StoreError) -> Self {
        ProcessError::from_error("state store", e)
    }
}

impl From<SerdeError> for ProcessError {
    fn from(e: SerdeError) -> Self {
        ProcessError::from_error("serde", e)
    }
}
