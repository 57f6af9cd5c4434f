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
//!   transaction markers.
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
pub use decode::{DecodeOptions, DecodedBatches, decode_batch, decode_batches, split_batches};
pub use encode::{BatchBuilder, BatchOptions, RecordInput};
pub use header::{
    BatchHeader, Compression, MAGIC_V2, TimestampType, set_base_offset, set_partition_leader_epoch,
};
pub use record::{Record, RecordBatch, RecordHeader};
