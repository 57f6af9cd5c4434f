//! Splitting a records buffer into batches and decoding their records.
//!
//! Nothing here allocates from a count read off the wire without first
//! checking it against the bytes that could hold it: a record takes at least
//! 7 bytes (length, attributes, timestamp delta, offset delta, key length,
//! value length, header count) and a header at least 2 (key length, value
//! length).

use bytes::Bytes;

use super::compression;
use super::cursor::Cursor;
use super::header::{
    BatchHeader, Compression, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, TimestampType,
    peek_base_offset, peek_batch_length, verify_crc,
};
use super::record::{Record, RecordBatch, RecordHeader};
use crate::{ProtocolError, Result};

/// Smallest encoded record: seven one-byte fields.
const MIN_RECORD_LEN: usize = 7;
/// Smallest record body (after the length prefix).
const MIN_RECORD_BODY_LEN: usize = MIN_RECORD_LEN - 1;
/// Smallest encoded record header: key length and value length.
const MIN_HEADER_LEN: usize = 2;

/// How to decode record batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Check each batch's CRC-32C (default `true`). Only skip it for data
    /// that was already verified, such as a broker's own log.
    pub verify_crc: bool,
    /// The most bytes one batch's records may decompress to (default
    /// 256 MiB). A batch beyond it fails with [`ProtocolError::Compression`].
    pub max_decompressed_bytes: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            verify_crc: true,
            max_decompressed_bytes: 256 << 20,
        }
    }
}

/// A cap on what decoding several buffers together may hold: every
/// partition of one Fetch response, say, which is decoded at once. It is
/// charged with each compressed batch's decompressed bytes and with every
/// batch's decoded records (`size_of::<Record>()` each, compressed or not).
/// [`DecodeOptions::max_decompressed_bytes`] caps one batch; without a
/// budget, a response of many small batches that each decompress to just
/// under that cap (compression "bombs") could still exhaust memory.
///
/// ```
/// use weir_protocol::records::DecompressionBudget;
/// let budget = DecompressionBudget::new(1 << 20);
/// assert_eq!((budget.limit(), budget.used(), budget.remaining()), (1 << 20, 0, 1 << 20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecompressionBudget {
    limit: usize,
    used: usize,
    exhausted: bool,
}

impl DecompressionBudget {
    /// A budget of `limit` decompressed bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            used: 0,
            exhausted: false,
        }
    }

    /// No budget beyond each batch's own cap.
    pub fn unlimited() -> Self {
        Self::new(usize::MAX)
    }

    /// The budget.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes charged so far: decompressed data and decoded records.
    pub fn used(&self) -> usize {
        self.used
    }

    /// What is left.
    pub fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    /// Whether a batch was left undecoded because it did not fit in what
    /// was left (see [`decode_batches_within`]). Later calls with this
    /// budget decode nothing more.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }
}

/// The complete batches of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBatches {
    /// Every complete batch, in order.
    pub batches: Vec<RecordBatch>,
    /// Whether the buffer ended with part of a batch. A Fetch response may
    /// cut its last batch short; the consumer fetches it again from
    /// the next offset. If this is set and `batches` is empty, the fetch
    /// size is smaller than one batch.
    pub truncated_tail: bool,
    /// Whether decoding stopped before a batch because the shared
    /// [`DecompressionBudget`] could not hold it after what earlier
    /// batches took ([`decode_batches_within`]). `batches` is then a prefix
    /// of the buffer's batches; the consumer delivers it and fetches the
    /// rest again.
    pub budget_exhausted: bool,
}

/// What the start of a buffer holds.
enum Next {
    /// A complete batch of this many bytes.
    Batch(BatchHeader, usize),
    /// The start of a batch that the buffer does not hold all of.
    Partial,
    /// Nothing.
    End,
}

fn next_batch(rest: &[u8]) -> Result<Next> {
    if rest.is_empty() {
        return Ok(Next::End);
    }
    let (Some(base_offset), Some(batch_length)) = (peek_base_offset(rest), peek_batch_length(rest))
    else {
        return Ok(Next::Partial);
    };
    // Check the magic as soon as it is there, so that a legacy message set
    // or garbage is reported as such rather than as a short tail.
    if let Some(&magic) = rest.get(MAGIC_OFFSET)
        && magic as i8 != MAGIC_V2
    {
        return Err(ProtocolError::UnsupportedMagic {
            base_offset,
            magic: magic as i8,
        });
    }
    let min = (BatchHeader::LEN - LOG_OVERHEAD) as i32;
    if batch_length < min {
        return Err(ProtocolError::InvalidBatch {
            base_offset,
            message: format!("batch length {batch_length} is less than the header's {min}"),
        });
    }
    let total = LOG_OVERHEAD + batch_length as usize;
    let Some(batch) = rest.get(..total) else {
        return Ok(Next::Partial);
    };
    // Fields are validated by the caller, after the CRC if it checks one.
    Ok(Next::Batch(BatchHeader::read(batch)?, total))
}

/// Splits `buf` into complete batches, checking each header and CRC but not
/// decoding records: what a broker stores on Produce.
///
/// The returned [`Bytes`] are zero-copy slices of `buf`, each one whole
/// batch ([`BatchHeader::total_len`] bytes).
///
/// # Errors
/// Unlike [`decode_batches`], a partial batch at the end is an error
/// ([`ProtocolError::Truncated`]): producers only send whole batches. A bad
/// header or CRC is the error [`BatchHeader::parse`] or
/// [`ProtocolError::CrcMismatch`] describes.
pub fn split_batches(buf: &Bytes) -> Result<Vec<(BatchHeader, Bytes)>> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let rest = buf.get(pos..).unwrap_or_default();
        match next_batch(rest)? {
            Next::End => return Ok(out),
            Next::Partial => {
                let needed = match peek_batch_length(rest) {
                    Some(len) => LOG_OVERHEAD.saturating_add(usize::try_from(len).unwrap_or(0)),
                    None => LOG_OVERHEAD,
                };
                return Err(ProtocolError::Truncated {
                    what: "record batch",
                    needed,
                    available: rest.len(),
                });
            }
            Next::Batch(header, len) => {
                let batch = buf.slice(pos..pos + len);
                verify_crc(&header, &batch)?;
                header.validate()?;
                out.push((header, batch));
                pos += len;
            }
        }
    }
}

/// Decodes every complete batch in `buf`, as found in a Fetch response's
/// records field or a Produce request's.
///
/// Keys, values and header values of uncompressed batches are zero-copy
/// slices of `buf`; those of compressed batches share one buffer per batch.
///
/// # Errors
/// Any complete batch that is corrupt fails the whole call with a typed
/// [`ProtocolError`]; a partial batch at the end only sets
/// [`DecodedBatches::truncated_tail`].
pub fn decode_batches(buf: &Bytes, opts: &DecodeOptions) -> Result<DecodedBatches> {
    decode_batches_within(buf, opts, &mut DecompressionBudget::unlimited())
}

/// [`decode_batches`], with what the batches decode to (decompressed
/// bytes and records) counted against `budget`, which may be shared by
/// several calls (the partitions of one response).
///
/// A batch that does not fit in what is left of the budget, once earlier
/// batches have taken some of it, is not an error: decoding stops before
/// it, the batches before it are returned with
/// [`DecodedBatches::budget_exhausted`] set, and the budget is marked
/// [exhausted](DecompressionBudget::exhausted), so later calls with it
/// decode nothing. A consumer delivers what was decoded and fetches the
/// rest again; every response makes progress, because its first batch
/// always has the whole budget.
///
/// # Errors
/// As [`decode_batches`]; [`ProtocolError::DecompressionBudgetExceeded`]
/// only for a batch that would go past the budget on its own, with
/// nothing charged before it.
///
/// ```
/// use bytes::BytesMut;
/// use weir_protocol::records::{
///     BatchBuilder, BatchOptions, DecodeOptions, DecompressionBudget, Record, RecordInput,
///     decode_batches_within,
/// };
/// // Three batches of two records each; the budget holds the records of two.
/// let mut buf = BytesMut::new();
/// for base_offset in [0, 2, 4] {
///     let mut b = BatchBuilder::new(BatchOptions { base_offset, ..BatchOptions::default() });
///     for _ in 0..2 {
///         b.push(RecordInput { timestamp: 0, key: None, value: None, headers: vec![] });
///     }
///     buf.extend_from_slice(&b.build()?);
/// }
/// let mut budget = DecompressionBudget::new(4 * std::mem::size_of::<Record>());
/// let decoded = decode_batches_within(&buf.freeze(), &DecodeOptions::default(), &mut budget)?;
/// assert_eq!(decoded.batches.len(), 2);
/// assert!(decoded.budget_exhausted && budget.exhausted());
/// # Ok::<(), weir_protocol::ProtocolError>(())
/// ```
pub fn decode_batches_within(
    buf: &Bytes,
    opts: &DecodeOptions,
    budget: &mut DecompressionBudget,
) -> Result<DecodedBatches> {
    let mut batches = Vec::new();
    let mut pos = 0;
    let done = |batches, truncated_tail, budget_exhausted| {
        Ok(DecodedBatches {
            batches,
            truncated_tail,
            budget_exhausted,
        })
    };
    loop {
        if budget.exhausted {
            return done(batches, false, true);
        }
        let rest = buf.get(pos..).unwrap_or_default();
        match next_batch(rest)? {
            Next::End => return done(batches, false, false),
            Next::Partial => return done(batches, true, false),
            Next::Batch(header, len) => {
                let batch = buf.slice(pos..pos + len);
                let used_before = budget.used;
                match decode_one(header, &batch, opts, budget) {
                    Ok(decoded) => batches.push(decoded),
                    // The batch does not fit after what earlier ones took:
                    // what it decompressed is dropped here, so its charge
                    // is taken back, and the caller gets the batches
                    // before it (a consumer fetches the rest again).
                    Err(ProtocolError::DecompressionBudgetExceeded { .. }) if used_before > 0 => {
                        budget.used = used_before;
                        budget.exhausted = true;
                    }
                    Err(e) => return Err(e),
                }
                pos += len;
            }
        }
    }
}

/// Decodes one complete batch (exactly [`BatchHeader::total_len`] bytes, such
/// as an element of [`split_batches`]).
///
/// # Errors
/// As [`decode_batches`]; also [`ProtocolError::InvalidBatch`] if `batch`
/// is longer or shorter than its header says.
pub fn decode_batch(batch: &Bytes, opts: &DecodeOptions) -> Result<RecordBatch> {
    let header = BatchHeader::read(batch)?;
    if header.magic != MAGIC_V2 {
        return Err(ProtocolError::UnsupportedMagic {
            base_offset: header.base_offset,
            magic: header.magic,
        });
    }
    if header.total_len() != batch.len() {
        return Err(ProtocolError::InvalidBatch {
            base_offset: header.base_offset,
            message: format!(
                "batch header says {} bytes, buffer holds {}",
                header.total_len(),
                batch.len()
            ),
        });
    }
    decode_one(header, batch, opts, &mut DecompressionBudget::unlimited())
}

fn decode_one(
    header: BatchHeader,
    batch: &Bytes,
    opts: &DecodeOptions,
    budget: &mut DecompressionBudget,
) -> Result<RecordBatch> {
    if opts.verify_crc {
        verify_crc(&header, batch)?;
    }
    header.validate()?;
    let used_before = budget.used;
    let over_budget = |budget: &DecompressionBudget| ProtocolError::DecompressionBudgetExceeded {
        base_offset: header.base_offset,
        limit: budget.limit(),
        used: used_before,
    };
    let body = batch.slice(BatchHeader::LEN..);
    let data = match header.compression()? {
        Compression::None => body,
        // A compacted batch may hold no records at all, and no codec frame.
        _ if body.is_empty() && header.record_count == 0 => body,
        codec => {
            let remaining = budget.remaining();
            let limit = opts.max_decompressed_bytes.min(remaining);
            let data = compression::decompress(codec, &body, limit).map_err(|e| {
                if limit < opts.max_decompressed_bytes
                    && compression::is_limit_error(&e, codec, limit)
                {
                    over_budget(budget)
                } else {
                    e
                }
            })?;
            budget.used = budget.used.saturating_add(data.len());
            Bytes::from(data)
        }
    };
    // The decoded records cost `size_of::<Record>()` (104 bytes) each,
    // however few bytes they take on the wire (7 at least): a bomb of
    // minimal records that decompresses to 256 MiB would otherwise decode
    // to 3.8 GB of `Record`s. They are charged before they are allocated.
    let decoded = usize::try_from(header.record_count)
        .unwrap_or(0)
        .saturating_mul(std::mem::size_of::<Record>());
    if decoded > budget.remaining() {
        return Err(over_budget(budget));
    }
    budget.used = budget.used.saturating_add(decoded);
    let records = decode_records(&header, &data)?;
    Ok(RecordBatch { header, records })
}

fn decode_records(header: &BatchHeader, data: &Bytes) -> Result<Vec<Record>> {
    let mut cursor = Cursor::new(data, header.base_offset);
    let count = usize::try_from(header.record_count).unwrap_or(0);
    if count > cursor.remaining() / MIN_RECORD_LEN {
        return Err(ProtocolError::CountOutOfBounds {
            what: "record count",
            count: i64::from(header.record_count),
            available: cursor.remaining(),
        });
    }
    let mut records = Vec::with_capacity(count);
    let mut previous_delta: i64 = -1;
    for _ in 0..count {
        let record = decode_record(header, &mut cursor, &mut previous_delta)?;
        records.push(record);
    }
    if cursor.remaining() != 0 {
        return Err(cursor.invalid(format!(
            "{} bytes left after the {count} records the header announces",
            cursor.remaining()
        )));
    }
    Ok(records)
}

fn decode_record(
    header: &BatchHeader,
    cursor: &mut Cursor<'_>,
    previous_delta: &mut i64,
) -> Result<Record> {
    let len = cursor.varint("record length")?;
    let len = cursor.check_len(len, "record length")?;
    if len < MIN_RECORD_BODY_LEN {
        return Err(cursor.invalid(format!(
            "record length {len} is less than the minimum {MIN_RECORD_BODY_LEN}"
        )));
    }
    let mut rec = cursor.sub(len, "record")?;
    let _attributes = rec.i8("record attributes")?; // unused by every Kafka version so far
    let timestamp_delta = rec.varlong("record timestamp delta")?;
    let offset_delta = i64::from(rec.varint("record offset delta")?);
    // Offsets only grow inside a batch, and never past the header's last
    // offset: otherwise two batches could claim the same offset.
    if offset_delta <= *previous_delta || offset_delta > i64::from(header.last_offset_delta) {
        return Err(rec.invalid(format!(
            "record offset delta {offset_delta} after {previous_delta} (last offset delta {})",
            header.last_offset_delta
        )));
    }
    *previous_delta = offset_delta;
    let key = rec.nullable_bytes("record key")?;
    let value = rec.nullable_bytes("record value")?;
    let header_count = rec.varint("record header count")?;
    if header_count < 0 {
        return Err(rec.invalid(format!("negative record header count {header_count}")));
    }
    let available = rec.remaining();
    let header_count = header_count as usize;
    if header_count > available / MIN_HEADER_LEN {
        return Err(ProtocolError::CountOutOfBounds {
            what: "record header count",
            count: header_count as i64,
            available,
        });
    }
    let mut headers = Vec::with_capacity(header_count);
    for _ in 0..header_count {
        let key_len = rec.varint("record header key length")?;
        if key_len < 0 {
            return Err(rec.invalid(format!(
                "record header key length {key_len}: keys can't be null"
            )));
        }
        let key_len = rec.check_len(key_len, "record header key length")?;
        let key = rec.take(key_len, "record header key")?;
        let key = String::from_utf8(key.to_vec())
            .map_err(|e| rec.invalid(format!("record header key is not UTF-8: {e}")))?;
        let value = rec.nullable_bytes("record header value")?;
        headers.push(RecordHeader { key, value });
    }
    if rec.remaining() != 0 {
        return Err(rec.invalid(format!(
            "{} bytes left inside a record of {len} bytes",
            rec.remaining()
        )));
    }
    let offset = header
        .base_offset
        .checked_add(offset_delta)
        .ok_or_else(|| rec.invalid(format!("base offset + delta {offset_delta} overflows")))?;
    let timestamp = match header.timestamp_type() {
        // The broker stamps only the header; every record takes its time.
        TimestampType::LogAppendTime => header.max_timestamp,
        TimestampType::CreateTime => header.base_timestamp.wrapping_add(timestamp_delta),
    };
    Ok(Record {
        offset,
        timestamp,
        key,
        value,
        headers,
    })
}
