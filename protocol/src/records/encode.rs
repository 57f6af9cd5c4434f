//! Building one record batch v2 from records.
//!
//! [`BatchBuilder`] writes each record as it is pushed, so
//! [`BatchBuilder::estimated_size`] is the exact uncompressed size so far and
//! [`BatchBuilder::build`] only compresses, fills in the header and computes
//! the CRC. One builder always gives exactly one batch, with offset deltas
//! `0..n` in push order.

use bytes::Bytes;

use super::compression;
use super::header::{
    BatchHeader, COMPRESSION_MASK, Compression, LOG_OVERHEAD, MAGIC_V2, TimestampType, attributes,
    compute_crc,
};
use super::record::{Record, RecordHeader};
use super::varint::{put_varint, put_varlong, varint_len, varlong_len};
use crate::{ProtocolError, Result};

/// The batch-level settings of a [`BatchBuilder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Codec for the records section.
    pub compression: Compression,
    /// Idempotent or transactional producer id; -1 for none.
    pub producer_id: i64,
    /// The producer's epoch; -1 for none.
    pub producer_epoch: i16,
    /// Sequence number of the first record; -1 for none.
    pub base_sequence: i32,
    /// Sets the transactional attribute bit.
    pub transactional: bool,
    /// Offset of the first record. Producers send 0; the broker rewrites it.
    pub base_offset: i64,
    /// Producers send -1; the broker rewrites it.
    pub partition_leader_epoch: i32,
    /// Producers use `CreateTime`.
    pub timestamp_type: TimestampType,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            compression: Compression::None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            base_offset: 0,
            partition_leader_epoch: -1,
            timestamp_type: TimestampType::CreateTime,
        }
    }
}

/// One record to append to a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordInput {
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    /// The key; `None` is a null key.
    pub key: Option<Bytes>,
    /// The value; `None` is a null value.
    pub value: Option<Bytes>,
    /// Headers, written in this order.
    pub headers: Vec<RecordHeader>,
}

/// A record in its wire form, relative to its batch.
pub(crate) struct EncodedRecord<'a> {
    pub(crate) offset_delta: i32,
    pub(crate) timestamp_delta: i64,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) headers: &'a [RecordHeader],
}

/// Bytes of a varint length (`-1` for null) plus the data.
fn nullable_len(data: Option<&[u8]>) -> Option<usize> {
    match data {
        None => Some(varint_len(-1)),
        Some(d) => Some(varint_len(i32::try_from(d.len()).ok()?) + d.len()),
    }
}

fn put_nullable(out: &mut Vec<u8>, data: Option<&[u8]>) {
    match data {
        None => put_varint(out, -1),
        Some(d) => {
            // Lengths were checked by `body_len` before writing.
            put_varint(out, i32::try_from(d.len()).unwrap_or(i32::MAX));
            out.extend_from_slice(d);
        }
    }
}

impl EncodedRecord<'_> {
    /// Bytes after the length prefix, or `None` if a length or count does
    /// not fit the varint `i32` the format uses.
    fn body_len(&self) -> Option<usize> {
        let mut n = 1 // attributes
            + varlong_len(self.timestamp_delta)
            + varint_len(self.offset_delta)
            + nullable_len(self.key)?
            + nullable_len(self.value)?
            + varint_len(i32::try_from(self.headers.len()).ok()?);
        for h in self.headers {
            n += nullable_len(Some(h.key.as_bytes()))? + nullable_len(h.value.as_deref())?;
        }
        i32::try_from(n).ok()?;
        Some(n)
    }

    /// Whole encoded size including the length prefix, or `None` if too large.
    pub(crate) fn encoded_len(&self) -> Option<usize> {
        let body = self.body_len()?;
        Some(varint_len(i32::try_from(body).ok()?) + body)
    }

    /// Appends the record; callers check [`EncodedRecord::encoded_len`] first.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        self.write_with_body_len(out, self.body_len().unwrap_or(0));
    }

    /// Appends the record whose [`body_len`](Self::body_len) is `body`.
    fn write_with_body_len(&self, out: &mut Vec<u8>, body: usize) {
        put_varint(out, i32::try_from(body).unwrap_or(i32::MAX));
        out.push(0); // record attributes: unused
        put_varlong(out, self.timestamp_delta);
        put_varint(out, self.offset_delta);
        put_nullable(out, self.key);
        put_nullable(out, self.value);
        put_varint(out, i32::try_from(self.headers.len()).unwrap_or(i32::MAX));
        for h in self.headers {
            put_nullable(out, Some(h.key.as_bytes()));
            put_nullable(out, h.value.as_deref());
        }
    }
}

/// Fills in the header of `buf` (61 reserved bytes, then the records
/// section) and computes the CRC. `buf.len() - 12` must fit in an `i32`.
pub(crate) fn assemble_batch(
    opts: &BatchOptions,
    control: bool,
    mut buf: Vec<u8>,
    record_count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
) -> Bytes {
    let mut header = BatchHeader {
        base_offset: opts.base_offset,
        batch_length: i32::try_from(buf.len().saturating_sub(LOG_OVERHEAD)).unwrap_or(i32::MAX),
        partition_leader_epoch: opts.partition_leader_epoch,
        magic: MAGIC_V2,
        crc: 0,
        attributes: attributes(
            opts.compression,
            opts.timestamp_type,
            opts.transactional,
            control,
        ),
        last_offset_delta: record_count.saturating_sub(1).max(0),
        base_timestamp,
        max_timestamp,
        producer_id: opts.producer_id,
        producer_epoch: opts.producer_epoch,
        base_sequence: opts.base_sequence,
        record_count,
    };
    header.write_to(&mut buf);
    header.crc = compute_crc(&buf);
    header.write_to(&mut buf);
    Bytes::from(buf)
}

/// Accumulates records into exactly one record batch v2.
///
/// ```
/// use bytes::Bytes;
/// use weir_protocol::records::{BatchBuilder, BatchOptions, Compression, RecordInput, DecodeOptions, decode_batches};
///
/// let mut builder = BatchBuilder::new(BatchOptions { compression: Compression::Lz4, ..Default::default() });
/// builder.push(RecordInput { timestamp: 1, key: None, value: Some(Bytes::from_static(b"v")), headers: vec![] });
/// let batch = builder.build()?;
/// let decoded = decode_batches(&batch, &DecodeOptions::default())?;
/// assert_eq!(decoded.batches[0].records[0].value.as_deref(), Some(&b"v"[..]));
/// # Ok::<(), weir_protocol::ProtocolError>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    opts: BatchOptions,
    /// 61 reserved header bytes, then the uncompressed records section.
    buf: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    /// The first record that could not be encoded; reported by `build`.
    error: Option<String>,
}

impl BatchBuilder {
    /// An empty builder.
    pub fn new(opts: BatchOptions) -> Self {
        Self::with_capacity(opts, 0)
    }

    /// An empty builder whose buffer holds `capacity` bytes (header
    /// included) before it grows: a producer that expects a full batch
    /// sizes it once.
    ///
    /// ```
    /// use weir_protocol::records::{BatchBuilder, BatchOptions};
    /// let b = BatchBuilder::with_capacity(BatchOptions::default(), 16 * 1024);
    /// assert!(b.is_empty());
    /// ```
    pub fn with_capacity(opts: BatchOptions, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity.max(BatchHeader::LEN));
        buf.resize(BatchHeader::LEN, 0);
        Self {
            opts,
            buf,
            count: 0,
            base_timestamp: 0,
            max_timestamp: i64::MIN,
            error: None,
        }
    }

    /// Replaces the batch-level settings (codec, producer id, epoch, base
    /// sequence, ...) before [`build`](Self::build): records pushed so far
    /// do not depend on them, so a producer can encode each record as it
    /// arrives and learn its batch's identity only when sending.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use weir_protocol::records::*;
    /// let mut b = BatchBuilder::new(BatchOptions::default());
    /// let record = RecordInput { timestamp: 5, value: Some(Bytes::from_static(b"v")), ..Default::default() };
    /// b.push_ref(&record);
    /// b.set_options(BatchOptions { producer_id: 3, producer_epoch: 1, base_sequence: 9, ..Default::default() });
    /// let decoded = decode_batches(&b.build()?, &DecodeOptions::default())?;
    /// let h = &decoded.batches[0].header;
    /// assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.base_timestamp), (3, 1, 9, 5));
    /// # Ok::<(), weir_protocol::ProtocolError>(())
    /// ```
    pub fn set_options(&mut self, opts: BatchOptions) {
        self.opts = opts;
    }

    /// Appends a record at the next offset delta.
    ///
    /// The first record's timestamp becomes the batch's base timestamp, as
    /// in the Java producer; later ones may be smaller (deltas are signed).
    /// A record too large for the format (a length over `i32::MAX`) makes
    /// [`BatchBuilder::build`] fail rather than this call, so that pushing
    /// stays infallible for the common case.
    pub fn push(&mut self, record: RecordInput) {
        self.push_ref(&record);
    }

    /// [`push`](Self::push) from a borrowed record: its bytes are copied
    /// into the batch, so the caller may drop or reuse it.
    pub fn push_ref(&mut self, record: &RecordInput) {
        if self.error.is_some() {
            return;
        }
        if self.count == 0 {
            self.base_timestamp = record.timestamp;
        }
        let encoded = EncodedRecord {
            offset_delta: self.count,
            // Wrapping, like Kafka's long arithmetic: the reader adds it back
            // with wrapping arithmetic too, so every i64 round-trips.
            timestamp_delta: record.timestamp.wrapping_sub(self.base_timestamp),
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &record.headers,
        };
        // The body's length, checked once (it is the record's first field).
        let Some(body) = encoded.body_len() else {
            self.error = Some(format!("record {} has a length over i32::MAX", self.count));
            return;
        };
        let Some(next) = self.count.checked_add(1) else {
            self.error = Some("more than i32::MAX records".to_owned());
            return;
        };
        encoded.write_with_body_len(&mut self.buf, body);
        self.count = next;
        self.max_timestamp = self.max_timestamp.max(record.timestamp);
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        usize::try_from(self.count).unwrap_or(0)
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The batch's size so far without compression, header included: what a
    /// producer compares against `batch.size`. A compressed batch is
    /// usually smaller.
    pub fn estimated_size(&self) -> usize {
        self.buf.len()
    }

    /// Compresses the records and returns the one encoded batch.
    ///
    /// # Errors
    /// [`ProtocolError::InvalidBatch`] if no record was pushed or one was too
    /// large to encode, and [`ProtocolError::Compression`] if the codec fails.
    pub fn build(self) -> Result<Bytes> {
        let invalid = |message: String| ProtocolError::InvalidBatch {
            base_offset: self.opts.base_offset,
            message,
        };
        if let Some(message) = self.error.clone() {
            return Err(invalid(message));
        }
        if self.count == 0 {
            return Err(invalid("a batch needs at least one record".to_owned()));
        }
        let buf = match self.opts.compression {
            Compression::None => self.buf,
            codec => {
                let records = self.buf.get(BatchHeader::LEN..).unwrap_or_default();
                let mut out = Vec::with_capacity(BatchHeader::LEN + records.len() / 2);
                out.resize(BatchHeader::LEN, 0);
                compression::compress(codec, records, &mut out)?;
                out
            }
        };
        if i32::try_from(buf.len() - LOG_OVERHEAD).is_err() {
            return Err(invalid(format!(
                "batch of {} bytes is too large",
                buf.len()
            )));
        }
        Ok(assemble_batch(
            &self.opts,
            false,
            buf,
            self.count,
            self.base_timestamp,
            self.max_timestamp,
        ))
    }
}

/// Re-encodes a stored batch keeping only `records`, a subset of its own
/// in offset order, as a log cleaner does: the base offset, last offset
/// delta, producer id, epoch, base sequence and transactional and control
/// bits stay, so offsets never move and producer state survives; the
/// records keep their offsets (the deltas may now have gaps) and are
/// written uncompressed. With no records left, the result is an empty
/// batch that readers skip.
///
/// # Errors
/// [`ProtocolError::InvalidBatch`] if a record's offset lies outside the
/// batch or a record is too large to encode.
pub fn rewrite_batch(original: &BatchHeader, records: &[Record]) -> Result<Bytes> {
    let invalid = |message: String| ProtocolError::InvalidBatch {
        base_offset: original.base_offset,
        message,
    };
    let base_timestamp = records
        .first()
        .map_or(original.base_timestamp, |r| r.timestamp);
    let mut buf = vec![0u8; BatchHeader::LEN];
    for r in records {
        let offset_delta = r
            .offset
            .checked_sub(original.base_offset)
            .and_then(|d| i32::try_from(d).ok())
            .filter(|d| (0..=original.last_offset_delta).contains(d))
            .ok_or_else(|| invalid(format!("offset {} is outside the batch", r.offset)))?;
        let encoded = EncodedRecord {
            offset_delta,
            timestamp_delta: r.timestamp.wrapping_sub(base_timestamp),
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &r.headers,
        };
        if encoded.encoded_len().is_none() {
            return Err(invalid(format!(
                "record at offset {} is too large",
                r.offset
            )));
        }
        encoded.write_to(&mut buf);
    }
    let mut header = *original;
    header.batch_length = i32::try_from(buf.len() - LOG_OVERHEAD)
        .map_err(|_| invalid(format!("batch of {} bytes is too large", buf.len())))?;
    header.attributes = original.attributes & !COMPRESSION_MASK;
    header.base_timestamp = base_timestamp;
    header.record_count = i32::try_from(records.len())
        .map_err(|_| invalid("more than i32::MAX records".to_owned()))?;
    header.write_to(&mut buf);
    header.crc = compute_crc(&buf);
    header.write_to(&mut buf);
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::header::verify_crc;

    fn input(ts: i64, value: &'static [u8]) -> RecordInput {
        RecordInput {
            timestamp: ts,
            key: None,
            value: Some(Bytes::from_static(value)),
            headers: vec![],
        }
    }

    #[test]
    fn header_fields_follow_the_records_and_options() {
        let opts = BatchOptions {
            producer_id: 5,
            producer_epoch: 2,
            base_sequence: 40,
            transactional: true,
            ..Default::default()
        };
        let mut b = BatchBuilder::new(opts);
        b.push(input(1000, b"a"));
        b.push(input(900, b"b"));
        b.push(input(1500, b"c"));
        assert_eq!(b.len(), 3);
        let size = b.estimated_size();
        let bytes = b.build().unwrap();
        assert_eq!(bytes.len(), size, "uncompressed estimate is exact");
        let h = BatchHeader::parse(&bytes).unwrap();
        assert_eq!(h.total_len(), bytes.len());
        assert_eq!((h.base_timestamp, h.max_timestamp), (1000, 1500));
        assert_eq!((h.record_count, h.last_offset_delta), (3, 2));
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (5, 2, 40)
        );
        assert_eq!((h.base_offset, h.partition_leader_epoch), (0, -1));
        assert!(h.is_transactional() && !h.is_control());
        verify_crc(&h, &bytes).unwrap();
    }

    #[test]
    fn record_bytes_match_the_spec_by_hand() {
        let mut b = BatchBuilder::new(BatchOptions::default());
        b.push(RecordInput {
            timestamp: 10,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: vec![RecordHeader {
                key: "h".into(),
                value: Some(Bytes::from_static(b"v")),
            }],
        });
        let bytes = b.build().unwrap();
        // length 11 (zigzag 22), attrs 0, ts delta 0, offset delta 0,
        // key len 1 (2) "k", value null (1), 1 header (2): "h" -> "v".
        let record: &[u8] = &[22, 0, 0, 0, 2, b'k', 1, 2, 2, b'h', 2, b'v'];
        assert_eq!(&bytes[61..], record);
    }

    #[test]
    fn an_empty_builder_does_not_build() {
        let err = BatchBuilder::new(BatchOptions::default())
            .build()
            .unwrap_err();
        assert!(matches!(err, ProtocolError::InvalidBatch { .. }), "{err:?}");
    }

    #[test]
    fn a_rewritten_batch_keeps_offsets_with_gaps_and_its_producer_fields() {
        use crate::records::{DecodeOptions, decode_batch};
        let opts = BatchOptions {
            compression: Compression::Lz4,
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 100,
            transactional: true,
            base_offset: 50,
            ..Default::default()
        };
        let mut b = BatchBuilder::new(opts);
        for (i, v) in [&b"a"[..], b"b", b"c", b"d"].into_iter().enumerate() {
            b.push(RecordInput {
                timestamp: 1_000 + i64::try_from(i).unwrap(),
                key: Some(Bytes::from_static(v)),
                value: Some(Bytes::from_static(v)),
                headers: vec![],
            });
        }
        let original = b.build().unwrap();
        let header = BatchHeader::parse(&original).unwrap();
        let decoded = decode_batch(&original, &DecodeOptions::default()).unwrap();
        let kept: Vec<Record> = decoded
            .records
            .iter()
            .filter(|r| r.offset == 51 || r.offset == 53)
            .cloned()
            .collect();

        let rewritten = rewrite_batch(&header, &kept).unwrap();
        let h = BatchHeader::parse(&rewritten).unwrap();
        verify_crc(&h, &rewritten).unwrap();
        assert_eq!(h.compression().unwrap(), Compression::None);
        assert_eq!(
            (h.base_offset, h.last_offset_delta, h.record_count),
            (50, 3, 2)
        );
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (9, 1, 100)
        );
        assert!(h.is_transactional());
        let again = decode_batch(&rewritten, &DecodeOptions::default()).unwrap();
        assert_eq!(again.records, kept);

        let empty = rewrite_batch(&header, &[]).unwrap();
        let h = BatchHeader::parse(&empty).unwrap();
        assert_eq!((h.record_count, h.next_offset()), (0, 54));

        let mut stray = kept[0].clone();
        stray.offset = 54;
        assert!(matches!(
            rewrite_batch(&header, &[stray]),
            Err(ProtocolError::InvalidBatch {
                base_offset: 50,
                ..
            })
        ));
    }
}
