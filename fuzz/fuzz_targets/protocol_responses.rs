//! Frames and responses as the client reads them: a byte stream split by
//! `FrameDecoder`, each frame decoded as the response of one API the client
//! (or weir-group) sends, at a version it can negotiate (`R::VERSIONS` capped
//! by `version_cap`), strictly and tolerantly; Fetch responses go on to
//! decode their records as the consumer does. Nothing may panic or hang.
//!
//! Input: byte 0 picks the API, byte 1 the version, byte 2 the frame
//! decoder's limit; the rest is the stream from the broker.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use weir_client::connection::version_cap;
use weir_protocol::api::{decode_response, decode_response_tolerant, peek_correlation_id};
use weir_protocol::frame::FrameDecoder;
use weir_protocol::kafka_protocol::messages::*;
use weir_protocol::kafka_protocol::protocol::Request;
use weir_protocol::records::{DecodeOptions, DecompressionBudget, decode_batches_within};
use weir_protocol::versions::BrokerVersions;

fn pick_version<R: Request>(b: u8) -> i16 {
    let range = R::VERSIONS;
    let api = ApiKey::try_from(R::KEY).unwrap();
    let max = version_cap(api).map_or(range.max, |c| c.min(range.max));
    let span = (max - range.min + 1).max(1) as u16;
    range.min + (u16::from(b) % span) as i16
}

fn decode_as<R: Request>(frame: Bytes, vb: u8) -> Option<R::Response>
where
    R::Response: PartialEq + std::fmt::Debug,
{
    let version = pick_version::<R>(vb);
    let _ = peek_correlation_id(&frame);
    let strict = decode_response::<R>(frame.clone(), version);
    let tolerant = decode_response_tolerant::<R>(frame, version);
    // What the strict decoder accepts, the tolerant one accepts the same way.
    if let Ok((c, body)) = &strict {
        let (tc, tbody, skipped) = tolerant.as_ref().expect("tolerant rejects a strict frame");
        assert_eq!((c, body, 0usize), (tc, tbody, *skipped));
    }
    tolerant.ok().map(|(_, body, _)| body)
}

fn fetch_records(resp: &FetchResponse) {
    let opts = DecodeOptions {
        verify_crc: true,
        max_decompressed_bytes: 1 << 20,
    };
    let mut budget = DecompressionBudget::new(4 << 20);
    for topic in &resp.responses {
        for p in &topic.partitions {
            if let Some(records) = &p.records {
                let _ = decode_batches_within(records, &opts, &mut budget);
            }
        }
    }
}

fn one_frame(api: u8, vb: u8, frame: Bytes) {
    match api % 25 {
        0 => {
            // The handshake: at the asked version, then the v0 fallback.
            if let Some(r) = decode_as::<ApiVersionsRequest>(frame.clone(), vb) {
                let _ = BrokerVersions::from_response(&r).negotiate_for::<FetchRequest>(Some(12));
            }
            let _ = decode_response::<ApiVersionsRequest>(frame, 0);
        }
        1 => drop(decode_as::<MetadataRequest>(frame, vb)),
        2 => drop(decode_as::<ProduceRequest>(frame, vb)),
        3 => {
            if let Some(r) = decode_as::<FetchRequest>(frame, vb) {
                fetch_records(&r);
            }
        }
        4 => drop(decode_as::<ListOffsetsRequest>(frame, vb)),
        5 => drop(decode_as::<FindCoordinatorRequest>(frame, vb)),
        6 => drop(decode_as::<JoinGroupRequest>(frame, vb)),
        7 => drop(decode_as::<SyncGroupRequest>(frame, vb)),
        8 => drop(decode_as::<HeartbeatRequest>(frame, vb)),
        9 => drop(decode_as::<LeaveGroupRequest>(frame, vb)),
        10 => drop(decode_as::<OffsetCommitRequest>(frame, vb)),
        11 => drop(decode_as::<OffsetFetchRequest>(frame, vb)),
        12 => drop(decode_as::<DescribeGroupsRequest>(frame, vb)),
        13 => drop(decode_as::<ListGroupsRequest>(frame, vb)),
        14 => drop(decode_as::<CreateTopicsRequest>(frame, vb)),
        15 => drop(decode_as::<DeleteTopicsRequest>(frame, vb)),
        16 => drop(decode_as::<DescribeConfigsRequest>(frame, vb)),
        17 => drop(decode_as::<IncrementalAlterConfigsRequest>(frame, vb)),
        18 => drop(decode_as::<InitProducerIdRequest>(frame, vb)),
        19 => drop(decode_as::<AddPartitionsToTxnRequest>(frame, vb)),
        20 => drop(decode_as::<AddOffsetsToTxnRequest>(frame, vb)),
        21 => drop(decode_as::<TxnOffsetCommitRequest>(frame, vb)),
        22 => drop(decode_as::<EndTxnRequest>(frame, vb)),
        23 => drop(decode_as::<SaslHandshakeRequest>(frame, vb)),
        _ => drop(decode_as::<SaslAuthenticateRequest>(frame, vb)),
    }
}

fuzz_target!(|data: &[u8]| {
    let [api, vb, limit, stream @ ..] = data else {
        return;
    };
    let decoder = FrameDecoder::new(usize::from(*limit) << 10 | 0x3ff);
    let mut buf = BytesMut::from(stream);
    let mut frames = 0;
    while let Ok(Some(frame)) = decoder.decode(&mut buf) {
        one_frame(*api, vb.wrapping_add(frames), frame.freeze());
        frames = frames.wrapping_add(1);
    }
});
