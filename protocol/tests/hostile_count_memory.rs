//! The memory a hostile array count makes the decoder reserve, measured
//! through the process's peak virtual size. In its own test binary, so no
//! other test's thread can raise the peak during the measurement.

use bytes::{BufMut, BytesMut};
use weir_protocol::ProtocolError;
use weir_protocol::api::decode_response;
use weir_protocol::kafka_protocol::messages::MetadataRequest;

/// The process's peak virtual size (`VmPeak`), in bytes: a reservation
/// counts there even before its pages are touched.
fn vm_peak() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmPeak:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
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
    let before = vm_peak();
    let result = decode_response::<MetadataRequest>(frame, 1);
    let grown = vm_peak().saturating_sub(before);
    assert!(
        matches!(result, Err(ProtocolError::Decode { .. })),
        "{result:?}"
    );
    grown
}

const FRAME: usize = 8 << 20;

#[test]
fn a_huge_count_reserves_no_more_than_the_bytes_left_and_decodes_to_at_most_sixteen_times_the_frame()
 {
    // One test: the peak virtual size is the whole process's, so the two
    // measurements must not overlap.
    // Clamping the count to the bytes left is not enough on its own: an
    // element takes a byte on the wire but size_of::<T>() in memory (about
    // 90 bytes for a Metadata broker), so an 8 MiB frame reserved 746 MB.
    // The first element fails (a null host), so this is the reservation alone.
    let grown = peak_growth(metadata_frame(FRAME, 0xff));
    println!("reservation: VmPeak grew by {grown} bytes for an {FRAME}-byte frame");
    assert!(
        grown <= 2 * FRAME,
        "an {FRAME}-byte frame reserved {grown} bytes"
    );

    // Zeros decode as real brokers (12 bytes each on the wire), about 700,000
    // of them before the frame runs out: what a hostile frame can make the
    // decoder hold is the decoded structures, bounded by the frame cap
    // (`receive.message.max.bytes`) times this factor.
    let grown = peak_growth(metadata_frame(FRAME, 0));
    println!(
        "decoded: VmPeak grew by {grown} bytes for an {FRAME}-byte frame ({:.1}x)",
        grown as f64 / FRAME as f64
    );
    assert!(
        grown <= 16 * FRAME,
        "an {FRAME}-byte frame decoded to {grown} bytes"
    );
}
