//! What goes into the producer and what comes back.

use std::fmt;

use bytes::Bytes;
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
