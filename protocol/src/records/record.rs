//! Decoded records and batches.

use bytes::Bytes;

use super::control::ControlRecord;
use super::header::BatchHeader;

/// One record header: a UTF-8 key and an optional value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordHeader {
    /// The header's name. Kafka requires UTF-8; other bytes fail decoding.
    pub key: String,
    /// The header's value; `None` is a null value, distinct from empty.
    pub value: Option<Bytes>,
}

/// One decoded record, with its absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    /// The record's offset in its partition.
    pub offset: i64,
    /// Milliseconds since the epoch: the producer's timestamp, or the broker's
    /// append time if the batch uses `LogAppendTime`.
    pub timestamp: i64,
    /// The key; `None` is a null key, distinct from an empty one.
    pub key: Option<Bytes>,
    /// The value; `None` is a null value (a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// Headers in wire order; keys may repeat.
    pub headers: Vec<RecordHeader>,
}

/// A decoded batch: its header and its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    /// The batch header as it was on the wire.
    pub header: BatchHeader,
    /// The records, in offset order. Empty if compaction removed them all.
    pub records: Vec<Record>,
}

impl RecordBatch {
    /// The commit or abort marker this batch carries, if it is a control
    /// batch whose first record has a well-formed control key.
    ///
    /// Control records must never be delivered to the application; a
    /// read_committed consumer uses them to end a producer's transaction.
    pub fn control(&self) -> Option<ControlRecord> {
        if !self.header.is_control() {
            return None;
        }
        let key = self.records.first()?.key.as_ref()?;
        ControlRecord::parse_key(key)
    }
}
