//! The records processors see.

pub use weir_protocol::records::RecordHeader;

/// A record inside a topology: typed key and value, timestamp and headers.
///
/// ```
/// use weir_streams::Record;
/// let r = Record::new("word".to_string(), 1u64, 1_700_000_000_000);
/// let doubled = r.with_value(2u64);
/// assert_eq!(doubled.value, 2);
/// assert_eq!(doubled.key, "word");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Record<K, V> {
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
    /// Milliseconds since the epoch (the input record's timestamp, unless a
    /// processor changed it).
    pub timestamp: i64,
    /// Headers, in order; keys may repeat.
    pub headers: Vec<RecordHeader>,
}

impl<K, V> Record<K, V> {
    /// A record with no headers.
    pub fn new(key: K, value: V, timestamp: i64) -> Self {
        Record {
            key,
            value,
            timestamp,
            headers: Vec::new(),
        }
    }

    /// The same record with another key.
    pub fn with_key<K2>(self, key: K2) -> Record<K2, V> {
        Record {
            key,
            value: self.value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// The same record with another value.
    pub fn with_value<V2>(self, value: V2) -> Record<K, V2> {
        Record {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }

    /// The same record with another timestamp.
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }
}

/// Where the record being processed came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The source topic.
    pub topic: String,
    /// The source partition.
    pub partition: i32,
    /// The record's offset in that partition.
    pub offset: i64,
}

/// A record as it comes off a topic, before the source node decodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRecord {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The timestamp.
    pub timestamp: i64,
    /// The key bytes, `None` for null.
    pub key: Option<bytes::Bytes>,
    /// The value bytes, `None` for null.
    pub value: Option<bytes::Bytes>,
    /// Headers.
    pub headers: Vec<RecordHeader>,
}

/// A record a task writes: to a sink or repartition topic, or to a changelog.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputRecord {
    /// The topic, resolved (internal topics carry the application id).
    pub topic: String,
    /// An explicit partition (changelogs: the task's partition), or `None`
    /// for the default partitioner (murmur2 of the key bytes, as Java).
    pub partition: Option<i32>,
    /// The key bytes.
    pub key: Option<Vec<u8>>,
    /// The value bytes; `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// The timestamp.
    pub timestamp: i64,
    /// Headers.
    pub headers: Vec<RecordHeader>,
}
