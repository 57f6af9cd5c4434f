//! A hostile client's bytes against weir-testkit, in process: each frame is
//! decoded and handled exactly as a connection does (decode_request, the
//! state task's request path, deferred replies, response encoding), with
//! the harness's clock moving timers. Nothing may panic, and once every
//! timer has fired no connection may still wait for an answer.
//!
//! Input: a sequence of chunks `op: u8, len: u16 (BE), frame`. `op & 3` is
//! the connection slot (slot i talks to broker i % 3); `op >= 0xf0` instead
//! advances the clock by `len` milliseconds.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_testkit::fuzzing::{FrameResult, FuzzCluster};

fuzz_target!(|data: &[u8]| {
    let mut cluster = FuzzCluster::new(3, 4);
    let mut rest = data;
    while let [op, hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        if *op >= 0xf0 {
            cluster.advance(Duration::from_millis(len as u64));
            rest = tail;
            continue;
        }
        let take = len.min(tail.len());
        let frame = Bytes::copy_from_slice(&tail[..take]);
        rest = &tail[take..];
        let result = cluster.request(usize::from(*op & 3), frame);
        assert_ne!(result, FrameResult::Wedged, "a request was never answered");
    }
    assert_eq!(
        cluster.settle(),
        0,
        "requests left unanswered with no timer pending"
    );
});
