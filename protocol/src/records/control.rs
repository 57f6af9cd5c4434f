//! Control records: the commit and abort markers that end a transaction.
//!
//! A marker is a batch of its own with one record, the control and
//! transactional attribute bits set, and the transaction's producer id and
//! epoch. Its key is `version: i16 = 0, type: i16` (0 abort, 1 commit); its
//! value is `version: i16 = 0, coordinator_epoch: i32`.

use bytes::Bytes;

use super::encode::{BatchOptions, EncodedRecord, assemble_batch};
use super::header::{Compression, TimestampType};

/// What a control record marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlKind {
    /// The transaction was aborted: its records must be skipped.
    Abort,
    /// The transaction was committed.
    Commit,
    /// A control type this version of Weir does not know; Kafka's readers
    /// ignore those too.
    Unknown(i16),
}

impl ControlKind {
    /// The type field of the control key.
    pub fn id(self) -> i16 {
        match self {
            Self::Abort => 0,
            Self::Commit => 1,
            Self::Unknown(id) => id,
        }
    }

    /// The kind for a type field.
    pub fn from_id(id: i16) -> Self {
        match id {
            0 => Self::Abort,
            1 => Self::Commit,
            other => Self::Unknown(other),
        }
    }
}

/// A parsed control record key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlRecord {
    /// The key's version (0 for every marker written so far).
    pub version: i16,
    /// Commit, abort or unknown.
    pub kind: ControlKind,
}

impl ControlRecord {
    /// Parses a control record key; `None` if it is shorter than 4 bytes.
    ///
    /// Newer key versions may append fields, so extra bytes are ignored, as
    /// Kafka's `ControlRecordType.parse` does.
    pub fn parse_key(key: &[u8]) -> Option<Self> {
        let (version, rest) = key.split_first_chunk::<2>()?;
        let (kind, _) = rest.split_first_chunk::<2>()?;
        Some(Self {
            version: i16::from_be_bytes(*version),
            kind: ControlKind::from_id(i16::from_be_bytes(*kind)),
        })
    }
}

/// Encodes a transaction marker batch: one control record at `base_offset`.
///
/// The batch has the control and transactional bits set, no compression,
/// base sequence -1 and leader epoch -1 (a broker sets its epoch with
/// [`set_partition_leader_epoch`](super::set_partition_leader_epoch)).
pub fn encode_control_batch(
    producer_id: i64,
    producer_epoch: i16,
    base_offset: i64,
    timestamp: i64,
    kind: ControlKind,
    coordinator_epoch: i32,
) -> Bytes {
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.id().to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());

    let opts = BatchOptions {
        compression: Compression::None,
        producer_id,
        producer_epoch,
        base_sequence: -1,
        transactional: true,
        base_offset,
        partition_leader_epoch: -1,
        timestamp_type: TimestampType::CreateTime,
    };
    let mut body = vec![0u8; super::BatchHeader::LEN];
    EncodedRecord {
        offset_delta: 0,
        timestamp_delta: 0,
        key: Some(&key),
        value: Some(&value),
        headers: &[],
    }
    .write_to(&mut body);
    assemble_batch(&opts, true, body, 1, timestamp, timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{DecodeOptions, decode_batches};

    #[test]
    fn markers_decode_with_their_kind_and_coordinator_epoch() {
        for kind in [
            ControlKind::Abort,
            ControlKind::Commit,
            ControlKind::Unknown(7),
        ] {
            let bytes = encode_control_batch(42, 3, 1000, 1_700_000_000_000, kind, 9);
            let decoded = decode_batches(&bytes, &DecodeOptions::default()).unwrap();
            assert!(!decoded.truncated_tail);
            let [batch] = &decoded.batches[..] else {
                panic!("one batch expected")
            };
            let h = &batch.header;
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_offset),
                (42, 3, 1000)
            );
            assert_eq!(
                (h.record_count, h.last_offset_delta, h.base_sequence),
                (1, 0, -1)
            );
            assert_eq!(
                (h.base_timestamp, h.max_timestamp),
                (1_700_000_000_000, 1_700_000_000_000)
            );
            assert_eq!(batch.control(), Some(ControlRecord { version: 0, kind }));
            let record = &batch.records[0];
            assert_eq!(record.offset, 1000);
            assert_eq!(record.value.as_deref(), Some(&[0, 0, 0, 0, 0, 9][..]));
        }
    }

    #[test]
    fn short_keys_are_not_control_records() {
        assert_eq!(ControlRecord::parse_key(&[0, 0, 0]), None);
        assert_eq!(
            ControlRecord::parse_key(&[0, 1, 0, 1, 0xff]),
            Some(ControlRecord {
                version: 1,
                kind: ControlKind::Commit
            })
        );
    }
}
