//! Compressing and decompressing a batch's records section.
//!
//! Decompression is bounded: no codec may produce more than the caller's
//! `max_decompressed_bytes`, so a small "zip bomb" batch gives a typed
//! [`ProtocolError::Compression`] instead of exhausting memory. Streaming
//! codecs are read through [`Read::take`] with one byte of slack, which both
//! caps the output and tells "exactly at the limit" from "over it"; snappy
//! announces each block's length, which is checked before allocating.
//!
//! Settings follow the Java producer, so brokers and other clients see the
//! same bytes they would from it:
//! - gzip: default level (6); several concatenated members are accepted on
//!   read, as Java's `GZIPInputStream` does.
//! - LZ4: the standard LZ4 frame format with 64 KiB independent blocks and no
//!   content checksum. Java's reader decodes every block on its own, so
//!   linked blocks would not be portable.
//! - zstd: level 3, Java's default, one frame per batch from a context
//!   each thread reuses. zstd's own decoder limit on the window (128 MiB)
//!   bounds its working memory.
//! - snappy: see [`super::snappy`].

use std::io::{Read, Write};

use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};

use super::header::Compression;
use super::snappy;
use crate::{ProtocolError, Result};

const ZSTD_LEVEL: i32 = 3;

thread_local! {
    /// A zstd compression context per thread, reused from batch to batch:
    /// creating one per batch and zeroing its tables took 9% of the CPU of
    /// a 100 B zstd produce (`benches/peers`).
    static ZSTD: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Appends `input` as one zstd frame to `out`, with this thread's context.
fn zstd_compress(input: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    let start = out.len();
    out.resize(start + zstd::zstd_safe::compress_bound(input.len()), 0);
    let written = ZSTD.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| std::io::Error::other("the thread's zstd context is in use"))?;
        let compressor = match &mut *slot {
            Some(c) => c,
            None => slot.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
        };
        compressor.compress_to_buffer(input, out.get_mut(start..).unwrap_or_default())
    })?;
    out.truncate(start + written);
    Ok(())
}

fn error(codec: Compression, op: &'static str, e: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::Compression {
        codec: codec.name(),
        op,
        message: e.to_string(),
    }
}

/// Appends `input`, compressed with `codec`, to `out`.
pub(crate) fn compress(codec: Compression, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let err = |e: std::io::Error| error(codec, "compress", e);
    match codec {
        Compression::None => out.extend_from_slice(input),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
            enc.write_all(input).map_err(err)?;
            enc.finish().map_err(err)?;
        }
        Compression::Snappy => snappy::compress(input, out)?,
        Compression::Lz4 => {
            let info = FrameInfo::new()
                .block_size(BlockSize::Max64KB)
                .block_mode(BlockMode::Independent);
            let mut enc = FrameEncoder::with_frame_info(info, out);
            enc.write_all(input).map_err(err)?;
            enc.finish().map_err(|e| error(codec, "compress", e))?;
        }
        Compression::Zstd => zstd_compress(input, out).map_err(err)?,
    }
    Ok(())
}

/// Decompresses `input`, failing once the output would exceed `limit` bytes.
pub(crate) fn decompress(codec: Compression, input: &[u8], limit: usize) -> Result<Vec<u8>> {
    let err = |e: std::io::Error| error(codec, "decompress", e);
    match codec {
        Compression::None => {
            if input.len() > limit {
                return Err(limit_error(codec.name(), limit));
            }
            Ok(input.to_vec())
        }
        Compression::Gzip => read_bounded(
            codec,
            flate2::read::MultiGzDecoder::new(input),
            input.len(),
            limit,
        ),
        Compression::Snappy => snappy::decompress(input, limit),
        Compression::Lz4 => read_bounded(codec, FrameDecoder::new(input), input.len(), limit),
        Compression::Zstd => {
            let dec = zstd::stream::read::Decoder::with_buffer(input).map_err(err)?;
            read_bounded(codec, dec, input.len(), limit)
        }
    }
}

/// Whether `e` is the error [`decompress`] gives for output beyond `limit`.
pub(crate) fn is_limit_error(e: &ProtocolError, codec: Compression, limit: usize) -> bool {
    match (e, limit_error(codec.name(), limit)) {
        (
            ProtocolError::Compression {
                codec: a,
                op: x,
                message: m,
            },
            ProtocolError::Compression {
                codec: b,
                op: y,
                message: n,
            },
        ) => *a == b && *x == y && *m == n,
        _ => false,
    }
}

/// The error for output beyond `max_decompressed_bytes`.
pub(crate) fn limit_error(codec: &'static str, limit: usize) -> ProtocolError {
    ProtocolError::Compression {
        codec,
        op: "decompress",
        message: format!("output exceeds max_decompressed_bytes ({limit} bytes)"),
    }
}

fn read_bounded(
    codec: Compression,
    reader: impl Read,
    input_len: usize,
    limit: usize,
) -> Result<Vec<u8>> {
    // A guess at the output size saves reallocations; it is capped by the
    // limit, so a tiny input can't make us reserve much.
    let mut out = Vec::with_capacity(input_len.saturating_mul(4).min(limit));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| error(codec, "decompress", e))?;
    if out.len() > limit {
        return Err(limit_error(codec.name(), limit));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..200_000u32)
            .map(|i| (i % 97) as u8 ^ (i / 1000) as u8)
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let input = sample();
        for codec in Compression::ALL {
            let mut out = Vec::new();
            compress(codec, &input, &mut out).unwrap();
            if codec != Compression::None {
                assert!(out.len() < input.len(), "{codec:?} did not compress");
            }
            assert_eq!(
                decompress(codec, &out, input.len()).unwrap(),
                input,
                "{codec:?}"
            );
        }
    }

    #[test]
    fn a_reused_zstd_context_keeps_nothing_from_the_last_batch() {
        // The thread's context compresses one batch after another; each
        // frame decodes on its own to its own input, appended after what
        // `out` already held.
        let first = sample();
        let second: Vec<u8> = first.iter().rev().map(|b| b ^ 0x5a).collect();
        let mut frames = Vec::new();
        for input in [&first, &second, &first] {
            let mut out = vec![7u8; 61];
            compress(Compression::Zstd, input, &mut out).unwrap();
            assert_eq!(out[..61], [7u8; 61]);
            frames.push(out.split_off(61));
        }
        assert_eq!(frames[0], frames[2], "the same input, the same frame");
        for (frame, input) in frames.iter().zip([&first, &second, &first]) {
            assert_eq!(
                &decompress(Compression::Zstd, frame, input.len()).unwrap(),
                input
            );
        }
    }

    #[test]
    fn empty_input_round_trips() {
        for codec in Compression::ALL {
            let mut out = Vec::new();
            compress(codec, &[], &mut out).unwrap();
            assert_eq!(
                decompress(codec, &out, 0).unwrap(),
                Vec::<u8>::new(),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn zip_bombs_hit_the_limit_with_a_typed_error() {
        // 8 MiB of zeros compresses to a few KiB in every codec.
        let zeros = vec![0u8; 8 << 20];
        for codec in Compression::ALL {
            let mut bomb = Vec::new();
            compress(codec, &zeros, &mut bomb).unwrap();
            match decompress(codec, &bomb, 1 << 20) {
                Err(ProtocolError::Compression {
                    op: "decompress",
                    message,
                    ..
                }) => {
                    assert!(
                        message.contains("max_decompressed_bytes"),
                        "{codec:?}: {message}"
                    );
                }
                other => panic!(
                    "{codec:?}: expected the limit error, got {:?}",
                    other.map(|v| v.len())
                ),
            }
        }
    }

    #[test]
    fn output_exactly_at_the_limit_is_accepted() {
        let input = sample();
        for codec in Compression::ALL {
            let mut out = Vec::new();
            compress(codec, &input, &mut out).unwrap();
            assert!(decompress(codec, &out, input.len()).is_ok(), "{codec:?}");
            assert!(
                decompress(codec, &out, input.len() - 1).is_err(),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn lz4_frames_use_64k_independent_blocks_like_java() {
        let mut out = Vec::new();
        compress(Compression::Lz4, b"hello", &mut out).unwrap();
        assert_eq!(out[..4], [0x04, 0x22, 0x4d, 0x18], "LZ4 frame magic");
        // FLG: version 01, block independence set, no checksums, no size.
        assert_eq!(out[4], 0b0110_0000);
        // BD: block max size id 4 = 64 KiB.
        assert_eq!(out[5], 4 << 4);
    }

    #[test]
    fn garbage_is_an_error_for_every_codec() {
        let garbage = b"this is not compressed data at all, not even a little";
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            assert!(
                matches!(
                    decompress(codec, garbage, 1 << 20),
                    Err(ProtocolError::Compression { .. })
                ),
                "{codec:?}"
            );
        }
    }
}
