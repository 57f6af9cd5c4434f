//! Hostile and corrupt record batches: decoding must return a typed error or
//! a value, never panic and never allocate from an unchecked count; and any
//! change to the CRC-covered bytes of a batch must be detected.

// clippy allows unwrap in #[test] functions only; the helpers here are test code too.
#![allow(clippy::unwrap_used)]

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use weir_protocol::ProtocolError;
use weir_protocol::records::{
    BatchBuilder, BatchOptions, Compression, DecodeOptions, RecordHeader, RecordInput,
    decode_batch, decode_batches, split_batches,
};

/// A batch built by hand from the spec: header fields, then `records` as the
/// records section (already compressed if `attributes` says so), with a
/// correct length and CRC.
fn raw_batch(attributes: i16, last_offset_delta: i32, record_count: i32, records: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i64(0); // base offset
    b.put_i32((49 + records.len()) as i32); // batch length
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2); // magic
    b.put_u32(0); // crc, filled below
    b.put_i16(attributes);
    b.put_i32(last_offset_delta);
    b.put_i64(1000); // base timestamp
    b.put_i64(1000); // max timestamp
    b.put_i64(-1); // producer id
    b.put_i16(-1); // producer epoch
    b.put_i32(-1); // base sequence
    b.put_i32(record_count);
    b.put_slice(records);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

fn zigzag(v: i64) -> Vec<u8> {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    while u >= 0x80 {
        out.push((u as u8 & 0x7f) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
    out
}

/// One record body from its parts, each given as raw wire bytes.
fn record(parts: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = parts.concat();
    let mut out = zigzag(body.len() as i64);
    out.extend_from_slice(&body);
    out
}

fn decode(bytes: &Bytes) -> weir_protocol::Result<weir_protocol::records::DecodedBatches> {
    decode_batches(bytes, &DecodeOptions::default())
}

#[test]
fn a_hand_built_record_decodes() {
    let rec = record(&[
        &[0],
        &zigzag(5),
        &zigzag(0),
        &zigzag(1),
        b"k",
        &zigzag(-1),
        &zigzag(0),
    ]);
    let decoded = decode(&raw_batch(0, 0, 1, &rec)).unwrap();
    let r = &decoded.batches[0].records[0];
    assert_eq!((r.offset, r.timestamp), (0, 1005));
    assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
    assert_eq!(r.value, None);
}

#[test]
fn hostile_counts_and_lengths_are_typed_errors() {
    let ok_tail: &[u8] = &[0, 0, 0];
    let cases: Vec<(&str, Bytes)> = vec![
        // Two billion records announced in 8 bytes (and offsets to match).
        ("record count", raw_batch(0, i32::MAX, i32::MAX, &[0; 8])),
        // A key of a million bytes in a 10-byte record.
        (
            "key length",
            raw_batch(0, 0, 1, &record(&[&[0, 0, 0], &zigzag(1_000_000), &[1, 0]])),
        ),
        (
            "negative key length",
            raw_batch(0, 0, 1, &record(&[&[0, 0, 0], &zigzag(-2), &[1, 0]])),
        ),
        (
            "negative value length",
            raw_batch(0, 0, 1, &record(&[&[0, 0, 0], &[1], &zigzag(-7), &[0]])),
        ),
        (
            "header count",
            raw_batch(
                0,
                0,
                1,
                &record(&[&[0, 0, 0, 1, 1], &zigzag(i32::MAX as i64)]),
            ),
        ),
        (
            "negative header count",
            raw_batch(0, 0, 1, &record(&[&[0, 0, 0, 1, 1], &zigzag(-1)])),
        ),
        (
            "null header key",
            raw_batch(0, 0, 1, &record(&[&[0, 0, 0, 1, 1, 2], &zigzag(-1), &[1]])),
        ),
        (
            "non-UTF-8 header key",
            raw_batch(
                0,
                0,
                1,
                &record(&[&[0, 0, 0, 1, 1, 2], &zigzag(2), &[0xff, 0xfe], &[1]]),
            ),
        ),
        (
            "record length",
            raw_batch(0, 0, 1, &[0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0]),
        ),
        (
            "varint overflow",
            raw_batch(0, 0, 1, &record(&[&[0, 0], &[0xff; 6], ok_tail])),
        ),
        (
            "record too short",
            raw_batch(0, 0, 1, &[zigzag(2)[0], 0, 0, 0, 0, 0, 0]),
        ),
        (
            "offset delta past last",
            raw_batch(0, 0, 1, &record(&[&[0, 0], &zigzag(1), &[1, 1, 0]])),
        ),
        (
            "offset deltas not increasing",
            raw_batch(
                0,
                1,
                2,
                &[
                    record(&[&[0, 0, 0, 1, 1, 0]]),
                    record(&[&[0, 0, 0, 1, 1, 0]]),
                ]
                .concat(),
            ),
        ),
        (
            "bytes left in record",
            raw_batch(0, 0, 1, &record(&[&[0, 0, 0, 1, 1, 0, 99]])),
        ),
        (
            "bytes after records",
            raw_batch(0, 0, 1, &[record(&[&[0, 0, 0, 1, 1, 0]]), vec![0]].concat()),
        ),
        (
            "fewer records than count",
            raw_batch(
                0,
                1,
                2,
                &[record(&[&[0, 0, 0, 1, 1, 0]]), vec![0; 6]].concat(),
            ),
        ),
        (
            "unknown codec",
            raw_batch(6, 0, 1, &record(&[&[0, 0, 0, 1, 1, 0]])),
        ),
        ("garbage gzip", raw_batch(1, 0, 1, b"not gzip at all")),
        ("garbage lz4", raw_batch(3, 0, 1, b"not lz4 at all")),
        ("garbage zstd", raw_batch(4, 0, 1, b"not zstd at all")),
        (
            "garbage snappy",
            raw_batch(2, 0, 1, b"\x82SNAPPY\0garbage!"),
        ),
    ];
    for (name, bytes) in cases {
        let result = decode(&bytes);
        assert!(
            matches!(
                result,
                Err(ProtocolError::CountOutOfBounds { .. }
                    | ProtocolError::InvalidBatch { .. }
                    | ProtocolError::Truncated { .. }
                    | ProtocolError::Compression { .. })
            ),
            "{name}: {result:?}"
        );
        // The broker side checks headers and CRCs only, so it accepts these
        // (the CRC is right) unless the header itself is impossible.
        let _ = split_batches(&bytes);
    }
}

#[test]
fn a_zip_bomb_is_refused_with_a_typed_error() {
    // 200,000 records of a 1000-byte zero value: ~200 MB once inflated, a
    // few hundred KiB compressed.
    let mut builder = BatchBuilder::new(BatchOptions {
        compression: Compression::Zstd,
        ..Default::default()
    });
    let value = Bytes::from(vec![0u8; 1000]);
    for _ in 0..20_000 {
        builder.push(RecordInput {
            timestamp: 0,
            key: None,
            value: Some(value.clone()),
            headers: vec![],
        });
    }
    let bomb = builder.build().unwrap();
    assert!(bomb.len() < 200_000, "{}", bomb.len());
    let opts = DecodeOptions {
        max_decompressed_bytes: 1 << 20,
        ..Default::default()
    };
    match decode_batches(&bomb, &opts) {
        Err(ProtocolError::Compression {
            op: "decompress",
            message,
            ..
        }) => {
            assert!(message.contains("max_decompressed_bytes"), "{message}");
        }
        other => panic!("expected the decompression limit, got {other:?}"),
    }
    assert_eq!(
        decode_batches(&bomb, &DecodeOptions::default())
            .unwrap()
            .batches[0]
            .records
            .len(),
        20_000
    );
}

fn valid_batches() -> Vec<Bytes> {
    Compression::ALL
        .into_iter()
        .map(|compression| {
            let mut b = BatchBuilder::new(BatchOptions {
                compression,
                ..Default::default()
            });
            for i in 0..4u8 {
                b.push(RecordInput {
                    timestamp: 1_700_000_000_000 + i64::from(i),
                    key: (i % 2 == 0).then(|| Bytes::from(vec![b'k', i])),
                    value: Some(Bytes::from(vec![i; 30])),
                    headers: vec![RecordHeader {
                        key: format!("h{i}"),
                        value: None,
                    }],
                });
            }
            b.build().unwrap()
        })
        .collect()
}

/// Flipping any bits of any byte of a valid batch: base offset and epoch
/// changes are legitimate, everything else must be caught.
#[test]
fn every_single_byte_corruption_is_detected() {
    for original in valid_batches() {
        let reference = decode(&original).unwrap().batches.remove(0);
        for pos in 0..original.len() {
            for mask in [0x01u8, 0x80, 0xff, 0x5a] {
                let mut bytes = original.to_vec();
                bytes[pos] ^= mask;
                let bytes = Bytes::from(bytes);
                let result = decode(&bytes);
                match pos {
                    // Base offset and leader epoch: outside the CRC on purpose.
                    0..8 | 12..16 => {
                        let batch = result.unwrap().batches.remove(0);
                        assert_eq!(batch.records.len(), reference.records.len());
                    }
                    // Batch length: a longer batch is a truncated tail,
                    // a shorter one fails its CRC or leaves garbage.
                    8..12 => {
                        if let Ok(d) = result {
                            assert!(d.truncated_tail && d.batches.is_empty(), "pos {pos}");
                        }
                    }
                    16 => assert!(matches!(
                        result,
                        Err(ProtocolError::UnsupportedMagic { .. })
                    )),
                    _ => assert!(
                        matches!(result, Err(ProtocolError::CrcMismatch { .. })),
                        "pos {pos} mask {mask:#x}: {result:?}"
                    ),
                }
                if pos >= 16 {
                    assert!(
                        split_batches(&bytes).is_err(),
                        "split accepted a corrupt batch at {pos}"
                    );
                }
                // Without the CRC check the record parser sees the damage:
                // any answer is fine as long as it is not a panic.
                let _ = decode_batches(
                    &bytes,
                    &DecodeOptions {
                        verify_crc: false,
                        ..Default::default()
                    },
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let bytes = Bytes::from(bytes);
        let _ = decode(&bytes);
        let _ = split_batches(&bytes);
        let _ = decode_batch(&bytes, &DecodeOptions::default());
    }

    /// Garbage behind a valid header with a correct CRC reaches the record
    /// parser and every decompressor.
    #[test]
    fn random_record_sections_behind_valid_headers_never_panic(
        codec in 0i16..8,
        last_offset_delta in prop_oneof![0i32..10, any::<i32>()],
        record_count in prop_oneof![0i32..10, any::<i32>()],
        body in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let bytes = raw_batch(codec, last_offset_delta, record_count, &body);
        if let Ok(decoded) = decode(&bytes) {
            let batch = &decoded.batches[0];
            prop_assert_eq!(batch.records.len(), record_count as usize);
            prop_assert!(batch.records.iter().all(|r| r.offset <= i64::from(last_offset_delta)));
        }
    }

    /// A random bit pattern at a random position of a random valid batch:
    /// the same rules as the exhaustive test, over varied batch shapes.
    #[test]
    fn random_single_byte_corruption_of_random_batches_is_detected(
        codec in prop::sample::select(Compression::ALL.to_vec()),
        values in prop::collection::vec(prop::option::of(prop::collection::vec(any::<u8>(), 0..80)), 1..12),
        position in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let mut builder = BatchBuilder::new(BatchOptions { compression: codec, ..Default::default() });
        for (i, value) in values.iter().enumerate() {
            builder.push(RecordInput {
                timestamp: i as i64,
                key: None,
                value: value.clone().map(Bytes::from),
                headers: vec![RecordHeader { key: "k".into(), value: None }],
            });
        }
        let mut bytes = builder.build().unwrap().to_vec();
        let pos = position.index(bytes.len());
        bytes[pos] ^= mask;
        let bytes = Bytes::from(bytes);
        let result = decode(&bytes);
        match pos {
            0..8 | 12..16 => prop_assert_eq!(result.unwrap().batches[0].records.len(), values.len()),
            8..12 => prop_assert!(!matches!(result, Ok(ref d) if !d.truncated_tail), "{:?}", result),
            16 => prop_assert!(matches!(result, Err(ProtocolError::UnsupportedMagic { .. })), "{:?}", result),
            _ => prop_assert!(matches!(result, Err(ProtocolError::CrcMismatch { .. })), "{:?}", result),
        }
        let _ = decode_batches(&bytes, &DecodeOptions { verify_crc: false, ..Default::default() });
    }

    /// Random multi-byte damage to the records of valid batches, with the
    /// CRC recomputed so the parser and decompressors see it.
    #[test]
    fn mutated_records_with_fixed_crc_never_panic(
        which in 0usize..5,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = valid_batches()[which].to_vec();
        for (index, value) in edits {
            let pos = 61 + index.index(bytes.len() - 61);
            bytes[pos] = value;
        }
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        let _ = decode(&Bytes::from(bytes));
    }
}
