//! What goes into the producer and what comes back.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;
use weir_protocol::records::RecordHeader;

/// A topic and one of its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A record to send.
///
/// ```
/// use weir_client::producer::ProducerRecord;
/// let record = ProducerRecord::new("orders").with_key("customer-7").with_value("{\"total\": 12}");
/// assert_eq!(record.partition, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    /// The topic.
    pub topic: String,
    /// An explicit partition; `None` lets the partitioner choose (murmur2
    /// of the key, or the sticky partition for a null key).
    pub partition: Option<i32>,
    /// The key; `None` is a null key.
    pub key: Option<Bytes>,
    /// The value; `None` is a null value (a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// Headers, in order; keys may repeat.
    pub headers: Vec<RecordHeader>,
    /// Milliseconds since the epoch; `None` takes the current time.
    pub timestamp: Option<i64>,
    /// Checked by the sender right before each send of the record's batch
    /// (the first and every retry): once it is closed the batch is not
    /// sent, and its records fail with [`ClientError::SendGateClosed`].
    /// `None` sends whenever the producer is ready.
    ///
    /// [`ClientError::SendGateClosed`]: crate::ClientError::SendGateClosed
    pub gate: Option<SendGate>,
}

impl ProducerRecord {
    /// A record for `topic` with null key and value.
    pub fn new(topic: impl Into<String>) -> Self {
        Self {
            topic: topic.into(),
            ..Default::default()
        }
    }

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the value.
    pub fn with_value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sends to this partition instead of the partitioner's choice.
    pub fn with_partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Appends a header.
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push(RecordHeader {
            key: key.into(),
            value,
        });
        self
    }

    /// Sets the timestamp (milliseconds since the epoch).
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    /// Binds the record to `gate`: its batch is never sent (first send or
    /// retry) once the gate is closed. See [`SendGate`].
    pub fn with_gate(mut self, gate: SendGate) -> Self {
        self.gate = Some(gate);
        self
    }
}

/// A validity check a record's delivery depends on, such as a group
/// member's lease over the record's partition: the producer checks it
/// right before it puts the record's batch on the wire, for the first send
/// and for every retry, and once it fails the batch is dropped unsent and
/// its records fail with [`ClientError::SendGateClosed`]. Without it a
/// record admitted just before the lease ended could reach the broker much
/// later (`linger.ms`, the in-flight limit, retries up to
/// `delivery.timeout.ms`), after another owner started writing.
///
/// Records with different gates never share a batch. Two gates are equal
/// when they are clones of one another. The check must be cheap and must not
/// block: it runs under the producer's lock.
///
/// What is not covered: a request already written to the connection is not
/// recalled, so a gate shields against buffering and retries, not against
/// a request the network delivers late (bounded by `request.timeout.ms`).
///
/// ```
/// use std::time::Duration;
/// use weir_client::producer::{ProducerRecord, SendGate};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let gate = SendGate::until(tokio::time::Instant::now() + Duration::from_secs(5));
/// assert!(gate.is_open());
/// let record = ProducerRecord::new("out").with_value("v").with_gate(gate.clone());
/// assert_eq!(record.gate, Some(gate));
/// # }
/// ```
///
/// [`ClientError::SendGateClosed`]: crate::ClientError::SendGateClosed
#[derive(Clone)]
pub struct SendGate {
    check: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl SendGate {
    /// A gate open while `check` returns true. Once it returned false the
    /// producer fails the batch: a gate that opens again does not bring
    /// back the records it already failed.
    pub fn new(check: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self {
            check: Arc::new(check),
        }
    }

    /// A gate open strictly before `deadline` (tokio's clock).
    pub fn until(deadline: Instant) -> Self {
        Self::new(move || Instant::now() < deadline)
    }

    /// Whether a batch bound to this gate may be sent now.
    pub fn is_open(&self) -> bool {
        (self.check)()
    }
}

impl PartialEq for SendGate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.check, &other.check)
    }
}

impl Eq for SendGate {}

impl fmt::Debug for SendGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendGate")
            .field("check", &Arc::as_ptr(&self.check).cast::<()>())
            .finish()
    }
}

/// Where a sent record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record's offset; -1 with `acks=0`, where the broker doesn't answer.
    pub offset: i64,
    /// The record's timestamp: the producer's, or the broker's append time
    /// if the topic uses `LogAppendTime`.
    pub timestamp: i64,
}
