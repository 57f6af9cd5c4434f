//! Record batch v2 (magic 2), encoded and decoded by Weir itself.
//!
//! The producer, the consumer and the test broker all use this module:
//!
//! - **Producing:** [`BatchBuilder`] turns [`RecordInput`]s into exactly one
//!   batch, compressed with any [`Compression`] and checksummed.
//! - **Consuming:** [`decode_batches`] turns a Fetch response's records into
//!   [`RecordBatch`]es; a batch cut short at the end is reported, not
//!   failed. [`RecordBatch::control`] identifies commit and abort markers.
//! - **Brokering:** [`split_batches`] checks and splits a Produce request's
//!   records into raw batches, which a broker stores as bytes, assigning
//!   offsets with [`set_base_offset`] and [`set_partition_leader_epoch`]
//!   (neither field is covered by the CRC). [`encode_control_batch`] writes
//!   transaction markers; [`rewrite_batch`] writes what log compaction
//!   keeps of a batch.
//!
//! # Examples
//!
//! A producer's batch, appended by a broker at offset 42 and fetched back:
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use weir_protocol::records::*;
//!
//! let mut builder = BatchBuilder::new(BatchOptions { compression: Compression::Zstd, ..Default::default() });
//! for i in 0..3 {
//!     builder.push(RecordInput { timestamp: 1_000 + i, value: Some(Bytes::from(format!("v{i}"))), ..Default::default() });
//! }
//! let produced = builder.build()?;
//!
//! // Broker: check, then assign offsets in place; the CRC stays valid.
//! let (header, raw) = split_batches(&produced)?.remove(0);
//! assert_eq!(header.record_count, 3);
//! let mut stored = BytesMut::from(&raw[..]);
//! set_base_offset(&mut stored, 42);
//! set_partition_leader_epoch(&mut stored, 5);
//!
//! // Consumer: a fetch cut short in the middle of a second copy.
//! let mut fetched = stored.clone();
//! fetched.extend_from_slice(&stored[..30]);
//! let decoded = decode_batches(&fetched.freeze(), &DecodeOptions::default())?;
//! assert!(decoded.truncated_tail);
//! let offsets: Vec<i64> = decoded.batches[0].records.iter().map(|r| r.offset).collect();
//! assert_eq!(offsets, [42, 43, 44]);
//! # Ok::<(), weir_protocol::ProtocolError>(())
//! ```
//!
//! Why not `kafka-protocol`'s records module: it reserves memory from counts
//! read off the wire before checking them. Here every count and length is
//! bounded by the bytes left first, decompression is capped by
//! [`DecodeOptions::max_decompressed_bytes`], and bad bytes give a typed
//! [`ProtocolError`](crate::ProtocolError), never a panic.

mod compression;
mod control;
mod cursor;
mod decode;
mod encode;
mod header;
mod record;
mod snappy;
mod varint;

pub use control::{ControlKind, ControlRecord, encode_control_batch};
pub use decode::{
    DecodeOptions, DecodedBatches, DecompressionBudget, decode_batch, decode_batches,
    decode_batches_within, split_batches,
};
pub use encode::{BatchBuilder, BatchOptions, RecordInput, rewrite_batch};
pub use header::{
    BatchHeader, Compression, MAGIC_V2, TimestampType, set_base_offset, set_partition_leader_epoch,
    set_producer_state,
};
pub use record::{Record, RecordBatch, RecordHeader};
