//! The crate's one error type.

use std::sync::Arc;
use std::time::Duration;

use weir_protocol::{ApiKey, ProtocolError};

use crate::kerror::{KafkaCode, codes};

/// The result type of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Everything that can go wrong in the client.
///
/// Errors carry the context the caller needs to act on them: the broker
/// (address or node id), the API, and for server errors the topic and
/// partition. [`ClientError::is_retriable`] says whether trying again may help,
/// and [`ClientError::needs_metadata_refresh`] whether the metadata should be
/// refreshed before that.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// A message could not be encoded or decoded.
    #[error("broker {broker}: {source}")]
    Protocol {
        /// The broker's address.
        broker: String,
        /// What went wrong.
        #[source]
        source: ProtocolError,
    },
    /// Connecting, reading or writing failed.
    #[error("broker {broker}: {context}: {source}")]
    Io {
        /// The broker's address.
        broker: String,
        /// What was being done.
        context: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The broker closed the connection.
    #[error("broker {broker}: connection closed by the peer")]
    ConnectionClosed {
        /// The broker's address.
        broker: String,
    },
    /// A response named a correlation id that no request used.
    #[error("broker {broker}: response with unknown correlation id {correlation_id}")]
    UnknownCorrelationId {
        /// The broker's address.
        broker: String,
        /// The id in the response.
        correlation_id: i32,
    },
    /// The connection failed earlier; every request on it fails with the cause.
    #[error("broker {broker}: connection poisoned: {cause}")]
    Poisoned {
        /// The broker's address.
        broker: String,
        /// The first error, shared by every failed request.
        cause: Arc<ClientError>,
    },
    /// No response arrived within the request timeout.
    #[error("broker {broker}: {api:?} timed out after {after:?}")]
    RequestTimeout {
        /// The broker's address.
        broker: String,
        /// The API.
        api: ApiKey,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The broker answered with a Kafka error code.
    #[error("{}", describe_server_error(.code, .api, .broker, .topic.as_deref(), .partition, .message.as_deref()))]
    Server {
        /// The error code, with its name and whether it is retriable.
        code: KafkaCode,
        /// The API that failed.
        api: ApiKey,
        /// The broker's node id, if known.
        broker: Option<i32>,
        /// The topic (or group, or resource) the error is about, if any.
        topic: Option<String>,
        /// The partition, if any.
        partition: Option<i32>,
        /// The broker's error message, if it sent one.
        message: Option<String>,
    },
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(String),
    /// SASL authentication failed.
    #[error("broker {broker}: SASL {mechanism}: {message}")]
    Sasl {
        /// The broker's address.
        broker: String,
        /// The mechanism used.
        mechanism: String,
        /// What went wrong.
        message: String,
    },
    /// A configuration property is not known.
    #[error("unknown property `{key}`: not among the {client}'s properties ({accepted})")]
    UnknownProperty {
        /// The key given.
        key: String,
        /// Which client the properties configure: `admin client`,
        /// `producer` or `consumer`.
        client: &'static str,
        /// The keys this configuration accepts, comma-separated.
        accepted: String,
    },
    /// A configuration property has a value that cannot be used.
    #[error("invalid value `{value}` for `{key}`: expected {expected}")]
    InvalidProperty {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// None of the bootstrap addresses answered.
    #[error("no bootstrap broker answered (tried {tried}): {last}")]
    Bootstrap {
        /// The addresses tried, comma-separated.
        tried: String,
        /// The last failure.
        last: Box<ClientError>,
    },
    /// The metadata names no such broker.
    #[error("unknown broker id {0}")]
    UnknownBroker(i32),
    /// A topic or partition has no leader, or the metadata does not know it.
    #[error("{topic}-{partition}: no leader known")]
    NoLeader {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// A retried operation ran out of attempts or time.
    #[error("{what}: gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// The operation.
        what: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last error.
        last: Box<ClientError>,
    },
    /// A response lacked an entry the request asked for.
    #[error("{api:?} response has no entry for {what}")]
    MissingInResponse {
        /// The API.
        api: ApiKey,
        /// What was missing.
        what: String,
    },
    /// The client, or the part of it used, was closed.
    #[error("closed")]
    Closed,
    /// An idempotent batch that may already have been written was not sent
    /// again: the producer took a new producer id before its outcome was
    /// known (Java: "the producer id changed"). Under the new id the broker
    /// could not recognise a resend as a duplicate, so the records may or
    /// may not be in the log; resending them may duplicate them.
    #[error(
        "{topic}-{partition}: {records} records may or may not have been written: \
         producer id {producer_id} (epoch {epoch}) was replaced before their outcome was known, \
         and a resend under the new id could duplicate them"
    )]
    ProducerIdChanged {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// How many records the batch held.
        records: usize,
        /// The producer id the batch was last sent with.
        producer_id: i64,
        /// Its epoch.
        epoch: i16,
    },
    /// The [`SendGate`](crate::producer::SendGate) the records were bound
    /// to closed (a group member's lease ended, say) before their batch
    /// could be sent, or sent again: the producer dropped the batch.
    #[error(
        "{topic}-{partition}: {records} records not sent: their send gate closed{}",
        if *.maybe_written { " (an earlier attempt may have been written)" } else { "" }
    )]
    SendGateClosed {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// How many records the batch held.
        records: usize,
        /// An earlier send of the batch got no answer (a lost response, a
        /// timeout): the records may be in the log although they failed.
        maybe_written: bool,
    },
    /// One record batch of a Fetch response decodes (decompressed bytes and
    /// records) to more than the consumer allows for a whole response: 16
    /// times `fetch.max.bytes` (or `max.partition.fetch.bytes`, if larger).
    /// Many batches that only together go past it are read in parts, not
    /// failed. A hostile or corrupt broker's compression "bomb", or data
    /// that compresses better than that (raise `fetch.max.bytes`).
    #[error(
        "broker {broker}: {topic}-{partition}: a record batch of the fetch response decodes to \
         more than {limit} bytes (16 x fetch.max.bytes): {source}"
    )]
    FetchDecompressionLimit {
        /// The broker's address.
        broker: String,
        /// The topic whose records went over.
        topic: String,
        /// Its partition.
        partition: i32,
        /// The budget of the response.
        limit: usize,
        /// The decoder's error.
        #[source]
        source: ProtocolError,
    },
    /// A record is larger than the producer may send.
    #[error("{topic}: a record of about {size} bytes exceeds {setting} ({limit})")]
    RecordTooLarge {
        /// The record's topic.
        topic: String,
        /// The record's encoded size (upper bound).
        size: usize,
        /// The limit.
        limit: usize,
        /// The setting that sets the limit (`max.request.size`, `buffer.memory`).
        setting: &'static str,
    },
    /// An operation waited longer than its setting allows.
    #[error("{what}: timed out after {after:?} ({setting})")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
        /// The setting (`max.block.ms`, `delivery.timeout.ms`).
        setting: &'static str,
    },
    /// A consumer's position is outside the log and `auto.offset.reset` is `none`.
    #[error("{topic}-{partition}: offset {offset} is out of range and auto.offset.reset is none")]
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The position that was out of range.
        offset: i64,
    },
    /// An assigned partition has no position (no committed offset, no
    /// seek) and `auto.offset.reset` is `none` (Java's
    /// `NoOffsetForPartitionException`): seek it, then poll again.
    #[error("{topic}-{partition}: no offset to start from and auto.offset.reset is none")]
    NoOffsetForPartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// The consumer was asked about a partition it is not assigned.
    #[error("{topic}-{partition} is not assigned to this consumer")]
    NotAssigned {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// A transactional operation was called in a state that forbids it
    /// (for example `send` before `begin`). Nothing was sent.
    #[error("transactional producer {transactional_id}: {operation} is not allowed {state}")]
    TransactionState {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// The operation refused.
        operation: &'static str,
        /// Why, e.g. "before begin".
        state: &'static str,
    },
    /// Group metadata without a generation was passed where a member's is
    /// needed (a member that was dropped, or has not joined yet): its
    /// offsets would get past the coordinator's zombie check (KIP-447).
    /// Nothing was sent.
    #[error(
        "group {group}: metadata has no generation ({generation}, member id {member_id:?}); refusing to commit offsets with it"
    )]
    NoGroupGeneration {
        /// The group.
        group: String,
        /// The generation the metadata carried.
        generation: i32,
        /// The member id it carried.
        member_id: String,
    },
    /// A transaction failed. `class` says what the caller must do next:
    /// see [`crate::transaction::TransactionErrorClass`].
    #[error("transactional producer {transactional_id}: {operation} failed ({class}): {source}")]
    Transaction {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// The operation that failed.
        operation: &'static str,
        /// Fatal (drop the producer) or abortable (abort, then go on).
        class: crate::transaction::TransactionErrorClass,
        /// The underlying failure.
        #[source]
        source: Box<ClientError>,
    },
}

fn describe_server_error(
    code: &KafkaCode,
    api: &ApiKey,
    broker: &Option<i32>,
    topic: Option<&str>,
    partition: &Option<i32>,
    message: Option<&str>,
) -> String {
    let mut s = format!("{api:?}");
    if let Some(b) = broker {
        s.push_str(&format!(" on broker {b}"));
    }
    match (topic, partition) {
        (Some(t), Some(p)) => s.push_str(&format!(" for {t}-{p}")),
        (Some(t), None) => s.push_str(&format!(" for {t}")),
        _ => {}
    }
    s.push_str(&format!(
        ": {} ({}): {}",
        code.name, code.code, code.description
    ));
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        s.push_str(&format!(": {m}"));
    }
    s
}

impl ClientError {
    /// A server error for `api`, with no topic context yet.
    pub fn server(code: i16, api: ApiKey) -> Self {
        ClientError::Server {
            code: KafkaCode::from_code(code),
            api,
            broker: None,
            topic: None,
            partition: None,
            message: None,
        }
    }

    /// `Ok(())` for error code 0, otherwise a [`ClientError::Server`] naming
    /// the topic and partition.
    ///
    /// # Errors
    /// The server error when `code` is not 0.
    pub fn check(
        code: i16,
        api: ApiKey,
        topic: Option<&str>,
        partition: Option<i32>,
    ) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        Err(ClientError::Server {
            code: KafkaCode::from_code(code),
            api,
            broker: None,
            topic: topic.map(str::to_owned),
            partition,
            message: None,
        })
    }

    /// Adds the broker's own error message to a server error.
    pub fn with_message(mut self, msg: Option<&str>) -> Self {
        if let ClientError::Server { message, .. } = &mut self {
            *message = msg.map(str::to_owned);
        }
        self
    }

    /// Adds the broker id to a server error.
    pub fn with_broker(mut self, id: i32) -> Self {
        if let ClientError::Server { broker, .. } = &mut self {
            *broker = Some(id);
        }
        self
    }

    /// The Kafka error code, for server errors.
    pub fn kafka_code(&self) -> Option<KafkaCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            ClientError::RetriesExhausted { last, .. } => last.kafka_code(),
            _ => None,
        }
    }

    /// Whether trying the same operation again may succeed: retriable Kafka
    /// errors, timeouts and lost connections.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Server { code, .. } => code.retriable,
            ClientError::Io { .. }
            | ClientError::ConnectionClosed { .. }
            | ClientError::RequestTimeout { .. }
            | ClientError::NoLeader { .. }
            | ClientError::UnknownBroker(_) => true,
            // A poisoned connection is replaced by a new one; whether that
            // helps depends on why it was poisoned.
            ClientError::Poisoned { cause, .. } => cause.is_retriable() || cause.is_network(),
            // Every known broker was unreachable: they may be restarting.
            ClientError::Bootstrap { last, .. } => last.is_retriable(),
            _ => false,
        }
    }

    /// Whether this is a failure of the connection itself (so the connection
    /// should be dropped and a new one opened).
    pub fn is_network(&self) -> bool {
        matches!(
            self,
            ClientError::Io { .. }
                | ClientError::ConnectionClosed { .. }
                | ClientError::Poisoned { .. }
                | ClientError::UnknownCorrelationId { .. }
                | ClientError::RequestTimeout { .. }
        )
    }

    /// Whether the group coordinator refused this member's membership as
    /// stale (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`,
    /// `FENCED_INSTANCE_ID`, here or as the cause of a transaction error),
    /// or the caller had no generation to send
    /// ([`ClientError::NoGroupGeneration`]): the group rebalanced, the
    /// member's partitions may be someone else's, and what it did since its
    /// last commit must be dropped, not retried. Kafka Streams calls this a
    /// task migration.
    ///
    /// ```
    /// use weir_client::ClientError;
    /// use weir_protocol::ApiKey;
    ///
    /// assert!(ClientError::server(22, ApiKey::TxnOffsetCommit).is_stale_membership());
    /// assert!(!ClientError::server(15, ApiKey::TxnOffsetCommit).is_stale_membership());
    /// ```
    pub fn is_stale_membership(&self) -> bool {
        match self {
            ClientError::Server { code, .. } => matches!(
                code.code,
                codes::ILLEGAL_GENERATION | codes::UNKNOWN_MEMBER_ID | codes::FENCED_INSTANCE_ID
            ),
            ClientError::NoGroupGeneration { .. } => true,
            ClientError::Transaction { source, .. } => source.is_stale_membership(),
            ClientError::RetriesExhausted { last, .. } => last.is_stale_membership(),
            _ => false,
        }
    }

    /// Whether the metadata is probably stale: the leader moved, the topic is
    /// still being created, or the broker went away.
    pub fn needs_metadata_refresh(&self) -> bool {
        match self {
            ClientError::Server { code, .. } => matches!(
                code.code,
                3 | 5 | 6 | 9 | 74 | 75 | 100 | 103 // see kerror
            ),
            ClientError::NoLeader { .. } | ClientError::UnknownBroker(_) => true,
            other => other.is_network(),
        }
    }
}
