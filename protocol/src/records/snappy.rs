//! Snappy as Kafka clients write it.
//!
//! There are two dialects on the wire:
//!
//! - **xerial framing** (`\x82SNAPPY\0`, then big-endian `i32` version 1 and
//!   minimum compatible version 1, then blocks of `u32` big-endian compressed
//!   length + raw snappy block). The Java producer writes this, through
//!   snappy-java's `SnappyOutputStream` with 32 KiB blocks.
//! - **raw snappy** (one block with a varint length prefix). librdkafka
//!   writes this for record batch v2.
//!
//! Readers must accept both; Java's `SnappyInputStream`, librdkafka and the
//! `kafka-protocol` crate all sniff the xerial magic and fall back to raw.
//!
//! Weir *writes* xerial framing, as the Java producer and `kafka-protocol` do:
//! every Kafka reader accepts it, whereas raw snappy relies on each reader's
//! fallback path, and the 32 KiB blocks also bound what a reader must hold per
//! block.

use snap::raw::{Decoder, Encoder, decompress_len, max_compress_len};

use super::compression::limit_error;
use crate::{ProtocolError, Result};

const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// Magic + version 1 + minimum compatible version 1.
const XERIAL_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
/// snappy-java's default block size.
const XERIAL_BLOCK: usize = 32 * 1024;

fn error(op: &'static str, message: impl Into<String>) -> ProtocolError {
    ProtocolError::Compression {
        codec: "snappy",
        op,
        message: message.into(),
    }
}

/// Appends `input` to `out` as xerial-framed snappy.
pub(crate) fn compress(input: &[u8], out: &mut Vec<u8>) -> Result<()> {
    out.extend_from_slice(XERIAL_HEADER);
    let mut encoder = Encoder::new();
    for block in input.chunks(XERIAL_BLOCK) {
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let data_at = out.len();
        out.resize(data_at + max_compress_len(block.len()), 0);
        let written = encoder
            .compress(block, &mut out[data_at..])
            .map_err(|e| error("compress", e.to_string()))?;
        out.truncate(data_at + written);
        // A block is at most 32 KiB, so its compressed length fits in a u32.
        let len = u32::try_from(written).map_err(|_| error("compress", "block too large"))?;
        out[len_at..data_at].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

/// Decompresses xerial-framed or raw snappy, producing at most `limit` bytes.
pub(crate) fn decompress(input: &[u8], limit: usize) -> Result<Vec<u8>> {
    if input.starts_with(XERIAL_MAGIC) {
        decompress_xerial(input, limit)
    } else {
        let mut out = Vec::new();
        decompress_block(input, limit, &mut out)?;
        Ok(out)
    }
}

/// Appends one raw snappy block to `out`, checking its announced length
/// against the budget before allocating.
fn decompress_block(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<()> {
    let len = decompress_len(block).map_err(|e| error("decompress", e.to_string()))?;
    if len > limit.saturating_sub(out.len()) {
        return Err(limit_error("snappy", limit));
    }
    let at = out.len();
    out.resize(at + len, 0);
    let written = Decoder::new()
        .decompress(block, &mut out[at..])
        .map_err(|e| error("decompress", e.to_string()))?;
    out.truncate(at + written);
    Ok(())
}

fn decompress_xerial(input: &[u8], limit: usize) -> Result<Vec<u8>> {
    let Some(mut rest) = input.get(XERIAL_HEADER.len()..) else {
        return Err(error("decompress", "xerial header is truncated"));
    };
    let mut out = Vec::new();
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(error("decompress", "xerial block length is truncated"));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > tail.len() {
            return Err(error(
                "decompress",
                format!("xerial block of {len} bytes, {} left", tail.len()),
            ));
        }
        let (block, tail) = tail.split_at(len);
        decompress_block(block, limit, &mut out)?;
        rest = tail;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes written by a Java producer (snappy-java), from the
    /// `kafka-protocol` crate's compatibility test: one record, value "sdfdsf".
    const JAVA_XERIAL: &[u8] = b"\x82\x53\x4e\x41\x50\x50\x59\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x0f\x0d\x30\x18\x00\x00\x00\x01\x0csdfdsf\x00";
    const RAW: &[u8] = b"\r0\x18\0\0\0\x01\x0csdfdsf\0";
    const RECORD: &[u8] = b"\x18\x00\x00\x00\x01\x0csdfdsf\x00";

    #[test]
    fn java_xerial_and_raw_snappy_both_decode() {
        assert_eq!(decompress(JAVA_XERIAL, 1024).unwrap(), RECORD);
        assert_eq!(decompress(RAW, 1024).unwrap(), RECORD);
    }

    #[test]
    fn compress_matches_java_framing_byte_for_byte() {
        let mut out = Vec::new();
        compress(RECORD, &mut out).unwrap();
        assert_eq!(out, JAVA_XERIAL);
    }

    #[test]
    fn large_inputs_are_split_into_32k_blocks() {
        let input: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        compress(&input, &mut out).unwrap();
        assert_eq!(decompress(&out, input.len()).unwrap(), input);
        // Four blocks: 3 x 32 KiB + the rest; count them by walking the frames.
        let mut rest = &out[16..];
        let mut blocks = 0;
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            rest = &rest[4 + len..];
            blocks += 1;
        }
        assert_eq!(blocks, 4);
    }

    #[test]
    fn announced_lengths_over_the_limit_are_refused_before_allocating() {
        let input = vec![7u8; 10_000];
        let mut out = Vec::new();
        compress(&input, &mut out).unwrap();
        match decompress(&out, 9_999) {
            Err(ProtocolError::Compression {
                codec: "snappy",
                op: "decompress",
                message,
            }) => {
                assert!(message.contains("max_decompressed_bytes"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        // A raw block that claims ~4 GiB.
        let bomb = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(matches!(
            decompress(&bomb, 1 << 20),
            Err(ProtocolError::Compression { .. })
        ));
    }

    #[test]
    fn truncated_xerial_frames_are_errors() {
        assert!(decompress(&JAVA_XERIAL[..10], 1024).is_err());
        assert!(decompress(&JAVA_XERIAL[..18], 1024).is_err());
        assert!(decompress(&JAVA_XERIAL[..JAVA_XERIAL.len() - 1], 1024).is_err());
    }
}
