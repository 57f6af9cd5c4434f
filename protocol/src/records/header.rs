//! The 61-byte record batch v2 header, its attribute bits, and the in-place
//! rewrites a broker makes when it appends a batch.
//!
//! Layout (big-endian), with the byte offset of each field:
//!
//! | offset | field                  | type  |
//! |-------:|------------------------|-------|
//! | 0      | base_offset            | i64   |
//! | 8      | batch_length           | i32   |
//! | 12     | partition_leader_epoch | i32   |
//! | 16     | magic (= 2)            | i8    |
//! | 17     | crc (CRC-32C of 21..)  | u32   |
//! | 21     | attributes             | i16   |
//! | 23     | last_offset_delta      | i32   |
//! | 27     | base_timestamp         | i64   |
//! | 35     | max_timestamp          | i64   |
//! | 43     | producer_id            | i64   |
//! | 51     | producer_epoch         | i16   |
//! | 53     | base_sequence          | i32   |
//! | 57     | record_count           | i32   |

use crate::{ProtocolError, Result};

pub(crate) const BATCH_LENGTH_OFFSET: usize = 8;
pub(crate) const LEADER_EPOCH_OFFSET: usize = 12;
pub(crate) const MAGIC_OFFSET: usize = 16;
pub(crate) const CRC_OFFSET: usize = 17;
/// The CRC covers everything from the attributes to the end of the batch, so
/// the base offset and the leader epoch can be rewritten without touching it.
pub(crate) const CRC_START: usize = 21;
/// Bytes before `batch_length` starts counting: base offset and the length itself.
pub(crate) const LOG_OVERHEAD: usize = 12;
/// The only record batch format Weir speaks.
pub const MAGIC_V2: i8 = 2;

pub(crate) const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;

/// The codec of a batch's records section (attribute bits 0–2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Records are stored as they are.
    #[default]
    None,
    /// gzip (RFC 1952).
    Gzip,
    /// Snappy; written in the xerial framing Java producers use.
    Snappy,
    /// LZ4, in the standard LZ4 frame format.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// All codecs, in attribute order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec for attribute bits 0–2, or `None` for the unassigned ids 5–7.
    pub fn from_id(id: i16) -> Option<Self> {
        match id {
            0 => Some(Self::None),
            1 => Some(Self::Gzip),
            2 => Some(Self::Snappy),
            3 => Some(Self::Lz4),
            4 => Some(Self::Zstd),
            _ => None,
        }
    }

    /// The id stored in attribute bits 0–2.
    pub fn id(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The codec's name as Kafka's `compression.type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

/// What a batch's timestamps mean (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// Set by the producer when the record was created.
    #[default]
    CreateTime,
    /// Set by the broker on append; every record's timestamp is then the
    /// batch's `max_timestamp`.
    LogAppendTime,
}

/// The attributes word for a batch.
pub(crate) fn attributes(
    compression: Compression,
    timestamp_type: TimestampType,
    transactional: bool,
    control: bool,
) -> i16 {
    let mut a = compression.id();
    if timestamp_type == TimestampType::LogAppendTime {
        a |= TIMESTAMP_TYPE_BIT;
    }
    if transactional {
        a |= TRANSACTIONAL_BIT;
    }
    if control {
        a |= CONTROL_BIT;
    }
    a
}

/// Every field of a record batch v2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchHeader {
    /// Offset of the first record; assigned by the broker on append.
    pub base_offset: i64,
    /// Bytes after this field: the batch is `12 + batch_length` bytes long.
    pub batch_length: i32,
    /// The leader epoch at append; set by the broker, not covered by the CRC.
    pub partition_leader_epoch: i32,
    /// The format version, always 2 here.
    pub magic: i8,
    /// CRC-32C of the bytes from the attributes to the end of the batch.
    pub crc: u32,
    /// Codec, timestamp type, transactional and control bits.
    pub attributes: i16,
    /// Offset of the last record minus `base_offset`; kept when compaction
    /// removes records so that the next offset stays known.
    pub last_offset_delta: i32,
    /// Timestamp of the first record; record timestamps are deltas from it.
    pub base_timestamp: i64,
    /// The largest record timestamp (or the append time for `LogAppendTime`).
    pub max_timestamp: i64,
    /// Idempotent or transactional producer id, -1 if none.
    pub producer_id: i64,
    /// The producer's epoch, -1 if none.
    pub producer_epoch: i16,
    /// Sequence number of the first record, -1 if none.
    pub base_sequence: i32,
    /// Number of records in the batch (0 after compaction removed them all).
    pub record_count: i32,
}

fn be_i16(buf: &[u8], at: usize) -> i16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&buf[at..at + 2]);
    i16::from_be_bytes(b)
}

fn be_i32(buf: &[u8], at: usize) -> i32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    i32::from_be_bytes(b)
}

fn be_i64(buf: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    i64::from_be_bytes(b)
}

/// Reads the `batch_length` field of a buffer holding at least 12 bytes.
pub(crate) fn peek_batch_length(buf: &[u8]) -> Option<i32> {
    buf.get(..LOG_OVERHEAD)
        .map(|b| be_i32(b, BATCH_LENGTH_OFFSET))
}

/// Reads the base offset of a buffer holding at least 8 bytes.
pub(crate) fn peek_base_offset(buf: &[u8]) -> Option<i64> {
    buf.get(..8).map(|b| be_i64(b, 0))
}

impl BatchHeader {
    /// The header's size in bytes.
    pub const LEN: usize = 61;

    /// Parses the header at the start of `buf` (which may hold more bytes).
    ///
    /// Checks that the magic is 2, that the length covers at least a header,
    /// that the codec is known, and that the counts are not negative. It does
    /// not check the CRC: that needs the whole batch (see
    /// [`split_batches`](super::split_batches)).
    ///
    /// # Errors
    /// [`ProtocolError::Truncated`] if `buf` is shorter than 61 bytes,
    /// [`ProtocolError::UnsupportedMagic`] for magic other than 2, and
    /// [`ProtocolError::InvalidBatch`] for impossible field values.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader> {
        let header = Self::read(buf)?;
        header.validate()?;
        Ok(header)
    }

    /// Reads the fields without judging them, so that a caller can check the
    /// CRC first and report corruption as such.
    pub(crate) fn read(buf: &[u8]) -> Result<BatchHeader> {
        let Some(h) = buf.get(..Self::LEN) else {
            return Err(ProtocolError::Truncated {
                what: "record batch header",
                needed: Self::LEN,
                available: buf.len(),
            });
        };
        let header = BatchHeader {
            base_offset: be_i64(h, 0),
            batch_length: be_i32(h, BATCH_LENGTH_OFFSET),
            partition_leader_epoch: be_i32(h, LEADER_EPOCH_OFFSET),
            magic: h[MAGIC_OFFSET] as i8,
            crc: be_i32(h, CRC_OFFSET) as u32,
            attributes: be_i16(h, 21),
            last_offset_delta: be_i32(h, 23),
            base_timestamp: be_i64(h, 27),
            max_timestamp: be_i64(h, 35),
            producer_id: be_i64(h, 43),
            producer_epoch: be_i16(h, 51),
            base_sequence: be_i32(h, 53),
            record_count: be_i32(h, 57),
        };
        Ok(header)
    }

    fn invalid(&self, message: String) -> ProtocolError {
        ProtocolError::InvalidBatch {
            base_offset: self.base_offset,
            message,
        }
    }

    /// Checks the fields for values no valid batch has.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.magic != MAGIC_V2 {
            return Err(ProtocolError::UnsupportedMagic {
                base_offset: self.base_offset,
                magic: self.magic,
            });
        }
        let min_len = (Self::LEN - LOG_OVERHEAD) as i32;
        if self.batch_length < min_len {
            return Err(self.invalid(format!(
                "batch length {} is less than the header's {min_len}",
                self.batch_length
            )));
        }
        self.compression()?;
        if self.record_count < 0 {
            return Err(self.invalid(format!("negative record count {}", self.record_count)));
        }
        if self.last_offset_delta < 0 {
            return Err(self.invalid(format!(
                "negative last offset delta {}",
                self.last_offset_delta
            )));
        }
        // Offsets inside a batch are distinct and at most the last one, so
        // there can't be more records than offsets.
        if i64::from(self.record_count) > i64::from(self.last_offset_delta) + 1 {
            return Err(self.invalid(format!(
                "{} records cannot fit in offset deltas 0..={}",
                self.record_count, self.last_offset_delta
            )));
        }
        Ok(())
    }

    /// The codec of the records section.
    ///
    /// # Errors
    /// [`ProtocolError::InvalidBatch`] if bits 0–2 hold an unassigned codec id
    /// (never the case for a header returned by [`BatchHeader::parse`]).
    pub fn compression(&self) -> Result<Compression> {
        let id = self.attributes & COMPRESSION_MASK;
        Compression::from_id(id)
            .ok_or_else(|| self.invalid(format!("unknown compression codec id {id}")))
    }

    /// What the timestamps mean.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    /// Whether the batch holds a control record (a commit or abort marker).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Offset of the batch's last record, even if compaction removed it.
    pub fn last_offset(&self) -> i64 {
        // Wrapping like Kafka's long arithmetic: a corrupt base offset must
        // not panic a debug build.
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }

    /// The offset right after this batch: where the next fetch starts.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }

    /// Size of the whole batch in bytes: `12 + batch_length`.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + usize::try_from(self.batch_length).unwrap_or(0)
    }

    /// Writes the 61 header bytes into `out[..61]` exactly as the fields say
    /// (the CRC is not recomputed). Does nothing if `out` is shorter.
    pub(crate) fn write_to(&self, out: &mut [u8]) {
        let Some(h) = out.get_mut(..Self::LEN) else {
            return;
        };
        h[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        h[8..12].copy_from_slice(&self.batch_length.to_be_bytes());
        h[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        h[16] = self.magic as u8;
        h[17..21].copy_from_slice(&self.crc.to_be_bytes());
        h[21..23].copy_from_slice(&self.attributes.to_be_bytes());
        h[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        h[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        h[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        h[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        h[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        h[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        h[57..61].copy_from_slice(&self.record_count.to_be_bytes());
    }
}

/// CRC-32C of a complete batch as Kafka defines it: bytes 21 to the end.
pub(crate) fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(CRC_START..).unwrap_or_default())
}

/// Checks a complete batch's stored CRC against its bytes.
pub(crate) fn verify_crc(header: &BatchHeader, batch: &[u8]) -> Result<()> {
    let computed = compute_crc(batch);
    if computed == header.crc {
        Ok(())
    } else {
        Err(ProtocolError::CrcMismatch {
            base_offset: header.base_offset,
            stored: header.crc,
            computed,
        })
    }
}

/// Rewrites the base offset of an encoded batch in place, as a broker does
/// when it appends the batch to a log.
///
/// The base offset is not covered by the CRC, so the batch stays valid. A
/// slice shorter than 8 bytes is left as it is: every batch from
/// [`split_batches`](super::split_batches) or
/// [`BatchBuilder::build`](super::BatchBuilder::build) is at least 61 bytes.
pub fn set_base_offset(batch: &mut [u8], base: i64) {
    if let Some(field) = batch.get_mut(0..8) {
        field.copy_from_slice(&base.to_be_bytes());
    }
}

/// Rewrites the partition leader epoch of an encoded batch in place.
///
/// Like the base offset, the epoch sits before the CRC-covered bytes. A slice
/// shorter than 16 bytes is left as it is.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    if let Some(field) = batch.get_mut(LEADER_EPOCH_OFFSET..LEADER_EPOCH_OFFSET + 4) {
        field.copy_from_slice(&epoch.to_be_bytes());
    }
}

/// Rewrites the producer id, epoch and base sequence of an encoded batch
/// and its CRC, which covers them: what a producer does when it sends a
/// batch again under a new producer id or epoch (KIP-360), without
/// encoding its records again.
///
/// ```
/// use bytes::Bytes;
/// use weir_protocol::records::*;
/// let mut b = BatchBuilder::new(BatchOptions { producer_id: 7, producer_epoch: 0, base_sequence: 0, ..Default::default() });
/// b.push(RecordInput { timestamp: 1, value: Some(Bytes::from_static(b"v")), ..Default::default() });
/// let mut batch = b.build()?.to_vec();
/// set_producer_state(&mut batch, 8, 1, 40)?;
/// let decoded = decode_batches(&Bytes::from(batch), &DecodeOptions::default())?;
/// let h = &decoded.batches[0].header;
/// assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (8, 1, 40));
/// # Ok::<(), weir_protocol::ProtocolError>(())
/// ```
///
/// # Errors
/// [`ProtocolError::Truncated`] for a slice shorter than a batch header
/// (the slice is then left as it is).
pub fn set_producer_state(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Result<()> {
    let mut header = BatchHeader::read(batch)?;
    header.producer_id = producer_id;
    header.producer_epoch = producer_epoch;
    header.base_sequence = base_sequence;
    header.write_to(batch);
    header.crc = compute_crc(batch);
    header.write_to(batch);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BatchHeader {
        BatchHeader {
            base_offset: 100,
            batch_length: 49,
            partition_leader_epoch: 3,
            magic: 2,
            crc: 0xdead_beef,
            attributes: attributes(Compression::Zstd, TimestampType::LogAppendTime, true, false),
            last_offset_delta: 4,
            base_timestamp: 1_700_000_000_000,
            max_timestamp: 1_700_000_000_500,
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 17,
            record_count: 5,
        }
    }

    #[test]
    fn header_round_trips_through_its_61_bytes() {
        let h = sample();
        let mut buf = [0u8; 61];
        h.write_to(&mut buf);
        assert_eq!(BatchHeader::parse(&buf).unwrap(), h);
        assert_eq!(h.compression().unwrap(), Compression::Zstd);
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
        assert!(h.is_transactional());
        assert!(!h.is_control());
        assert_eq!(h.last_offset(), 104);
        assert_eq!(h.next_offset(), 105);
        assert_eq!(h.total_len(), 61);
    }

    #[test]
    fn attribute_bits_are_where_the_spec_puts_them() {
        assert_eq!(
            attributes(Compression::Lz4, TimestampType::CreateTime, false, false),
            3
        );
        assert_eq!(
            attributes(
                Compression::None,
                TimestampType::LogAppendTime,
                false,
                false
            ),
            8
        );
        assert_eq!(
            attributes(Compression::None, TimestampType::CreateTime, true, true),
            0x30
        );
        for c in Compression::ALL {
            assert_eq!(Compression::from_id(c.id()), Some(c));
        }
        assert_eq!(Compression::from_id(5), None);
    }

    fn parse_with(f: impl FnOnce(&mut BatchHeader)) -> Result<BatchHeader> {
        let mut h = sample();
        f(&mut h);
        let mut buf = [0u8; 61];
        h.write_to(&mut buf);
        BatchHeader::parse(&buf)
    }

    #[test]
    fn impossible_headers_are_typed_errors() {
        assert!(matches!(
            parse_with(|h| h.magic = 1),
            Err(ProtocolError::UnsupportedMagic { magic: 1, .. })
        ));
        assert!(matches!(
            parse_with(|h| h.batch_length = 48),
            Err(ProtocolError::InvalidBatch { .. })
        ));
        assert!(matches!(
            parse_with(|h| h.batch_length = -1),
            Err(ProtocolError::InvalidBatch { .. })
        ));
        assert!(matches!(
            parse_with(|h| h.attributes = 6),
            Err(ProtocolError::InvalidBatch { .. })
        ));
        assert!(matches!(
            parse_with(|h| h.record_count = -1),
            Err(ProtocolError::InvalidBatch { .. })
        ));
        assert!(matches!(
            parse_with(|h| h.last_offset_delta = -1),
            Err(ProtocolError::InvalidBatch { .. })
        ));
        assert!(matches!(
            parse_with(|h| h.record_count = 6),
            Err(ProtocolError::InvalidBatch { .. })
        ));
        assert!(matches!(
            BatchHeader::parse(&[0u8; 60]),
            Err(ProtocolError::Truncated {
                needed: 61,
                available: 60,
                ..
            })
        ));
    }

    #[test]
    fn rewrites_touch_only_their_fields() {
        let mut buf = [0u8; 61];
        sample().write_to(&mut buf);
        let before = buf;
        set_base_offset(&mut buf, 0x0102_0304_0506_0708);
        set_partition_leader_epoch(&mut buf, 77);
        let h = BatchHeader::parse(&buf).unwrap();
        assert_eq!(h.base_offset, 0x0102_0304_0506_0708);
        assert_eq!(h.partition_leader_epoch, 77);
        assert_eq!(buf[16..], before[16..]);
        assert_eq!(buf[8..12], before[8..12]);
        // Short slices are left alone rather than panicking.
        let mut short = [1u8; 4];
        set_base_offset(&mut short, 5);
        set_partition_leader_epoch(&mut short, 5);
        assert_eq!(short, [1u8; 4]);
    }
}
