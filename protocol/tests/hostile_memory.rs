//! The memory hostile bytes make the decoders reserve or hold, measured
//! through the process's peak virtual size (issue 17.3): a huge array count,
//! and a response of many compressed batches of minimal records. In its own
//! test binary, with one test, so nothing else raises the peak meanwhile.
//! Each step holds less than the next, so each is measured above the last
//! one's peak (VmPeak and VmHWM only grow).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{BufMut, BytesMut};
use weir_protocol::ProtocolError;
use weir_protocol::api::decode_response;
use weir_protocol::kafka_protocol::messages::MetadataRequest;
use weir_protocol::records::{
    BatchBuilder, BatchOptions, Compression, DecodeOptions, DecompressionBudget, RecordInput,
    decode_batches_within,
};

/// The process's peak virtual size (`VmPeak`: a reservation counts there
/// before its pages are touched) and peak resident size (`VmHWM`: memory
/// that malloc serves from an arena it had already reserved counts only
/// there), in bytes.
fn peaks() -> [usize; 2] {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    ["VmPeak:", "VmHWM:"].map(|key| {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    })
}

/// How much either peak has grown since `before`.
fn growth_since(before: [usize; 2]) -> usize {
    let now = peaks();
    now[0]
        .saturating_sub(before[0])
        .max(now[1].saturating_sub(before[1]))
}

/// A Metadata v1 response frame of `len` bytes: the correlation id, a
/// brokers count of `i32::MAX`, then `fill` to the end.
fn metadata_frame(len: usize, fill: u8) -> bytes::Bytes {
    let mut frame = BytesMut::with_capacity(len);
    frame.put_i32(9);
    frame.put_i32(i32::MAX);
    frame.resize(len, fill);
    frame.freeze()
}

/// How much decoding `frame` raises the peak virtual size.
fn peak_growth(frame: bytes::Bytes) -> usize {
    let before = peaks();
    let result = decode_response::<MetadataRequest>(frame, 1);
    let grown = growth_since(before);
    assert!(
        matches!(result, Err(ProtocolError::Decode { .. })),
        "{result:?}"
    );
    grown
}

const FRAME: usize = 8 << 20;

#[test]
fn hostile_counts_and_record_bombs_stay_within_the_stated_bounds() {
    // One test: the peak virtual size is the whole process's, so the
    // measurements must not overlap.
    // Clamping the count to the bytes left is not enough on its own: an
    // element takes a byte on the wire but size_of::<T>() in memory (about
    // 90 bytes for a Metadata broker), so an 8 MiB frame reserved 746 MB.
    // The first element fails (a null host), so this is the reservation alone.
    let grown = peak_growth(metadata_frame(FRAME, 0xff));
    println!("reservation: peak grew by {grown} bytes for an {FRAME}-byte frame");
    assert!(
        grown <= 2 * FRAME,
        "an {FRAME}-byte frame reserved {grown} bytes"
    );

    // Record bombs: 10 gzip batches of 100,000 minimal records, about
    // 140 KB each on the wire, 10.4 MB each decoded. The consumer decodes a
    // Fetch response within a budget (16 x fetch.max.bytes); here 32 MiB.
    let mut wire = BytesMut::new();
    for i in 0..10i64 {
        let mut builder = BatchBuilder::new(BatchOptions {
            compression: Compression::Gzip,
            base_offset: i * 100_000,
            ..BatchOptions::default()
        });
        for _ in 0..100_000 {
            builder.push(RecordInput {
                timestamp: 0,
                key: None,
                value: None,
                headers: vec![],
            });
        }
        wire.extend_from_slice(&builder.build().unwrap());
    }
    let wire = wire.freeze();
    const BUDGET: usize = 32 << 20;
    let mut budget = DecompressionBudget::new(BUDGET);
    let before = peaks();
    let result = decode_batches_within(&wire, &DecodeOptions::default(), &mut budget);
    let grown = growth_since(before);
    println!(
        "record bombs: {} bytes on the wire, peak grew by {grown} bytes within a {BUDGET}-byte budget",
        wire.len()
    );
    // Two bombs fit (11.3 MB each with their decompressed bytes);
    // decoding stops before the third, which the consumer fetches again.
    let decoded = result.unwrap();
    assert_eq!(decoded.batches.len(), 2);
    assert!(decoded.budget_exhausted);
    assert!(
        grown <= BUDGET + 8 * (1 << 20),
        "{grown} bytes held within a {BUDGET}-byte budget"
    );

    // Zeros decode as real brokers (12 bytes each on the wire), about 700,000
    // of them before the frame runs out: what a hostile frame can make the
    // decoder hold is the decoded structures, bounded by the frame cap
    // (`receive.message.max.bytes`) times this factor.
    let grown = peak_growth(metadata_frame(FRAME, 0));
    println!(
        "decoded: peak grew by {grown} bytes for an {FRAME}-byte frame ({:.1}x)",
        grown as f64 / FRAME as f64
    );
    assert!(
        grown <= 16 * FRAME,
        "an {FRAME}-byte frame decoded to {grown} bytes"
    );
}
