//! A response that announces far more array elements than it carries must be a
//! typed error, not an abort on allocation (see vendor/kafka-protocol/WEIR-PATCH.md).

use bytes::{BufMut, Bytes, BytesMut};
use weir_protocol::ProtocolError;
use weir_protocol::api::decode_response;
use weir_protocol::kafka_protocol::messages::MetadataRequest;

#[test]
fn an_array_count_of_two_billion_is_a_decode_error() {
    // Metadata v1 response: correlation id (header v0), then brokers: ARRAY(i32 count).
    let mut frame = BytesMut::new();
    frame.put_i32(9);
    frame.put_i32(i32::MAX);
    frame.put_slice(&[0u8; 16]);
    let result = decode_response::<MetadataRequest>(frame.freeze(), 1);
    assert!(
        matches!(result, Err(ProtocolError::Decode { .. })),
        "{result:?}"
    );
}

#[test]
fn a_compact_array_count_near_u32_max_is_a_decode_error() {
    // Metadata v9 (flexible): header v1 = correlation id + tagged fields, then
    // throttle_time_ms, then brokers: COMPACT_ARRAY (unsigned varint count + 1).
    let mut frame = BytesMut::new();
    frame.put_i32(9);
    frame.put_u8(0);
    frame.put_i32(0);
    frame.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    frame.put_slice(&[1u8; 8]);
    let result = decode_response::<MetadataRequest>(frame.freeze(), 9);
    assert!(
        matches!(result, Err(ProtocolError::Decode { .. })),
        "{result:?}"
    );
}

#[test]
fn random_bytes_never_panic_any_response_decoder() {
    // A cheap deterministic generator: this checks "no panic", not content.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2000 {
        let mut buf = Vec::new();
        let len = (state % 64) as usize;
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            buf.push(state as u8);
        }
        for version in [0, 1, 9, 12] {
            let _ = decode_response::<MetadataRequest>(Bytes::from(buf.clone()), version);
        }
    }
}
