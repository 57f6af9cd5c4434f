//! The consumer's read_committed filter (`weir_client::consumer::
//! read_committed::deliverable`) fed whatever batches a broker's records
//! field decodes to, with an arbitrary aborted-transaction list and fetch
//! offset. It must not panic, must never deliver a control record or one
//! below the fetch offset, must deliver under read_committed a subset of
//! what read_uncommitted delivers, and must advance past every batch.
//!
//! Input: fetch offset (8 bytes), the number of aborted transactions (1
//! byte), that many (producer id, first offset) pairs (16 bytes each), then
//! the records buffer. Batch CRCs are recomputed so that mutated batches
//! get through decoding.
#![no_main]

use std::collections::HashSet;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_client::config::consumer::IsolationLevel;
use weir_client::consumer::read_committed::{AbortedTransaction, deliverable};
use weir_protocol::records::{DecodeOptions, Record, decode_batches};

fn fix_crcs(buf: &mut [u8]) {
    let mut pos = 0usize;
    while let Some(head) = buf.get(pos..pos + 61) {
        let len = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let end = pos + 12 + len;
        let Some(batch) = buf.get_mut(pos..end) else {
            return;
        };
        if batch.len() < 61 {
            return;
        }
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        pos = end;
    }
}

fn i64_at(b: &[u8]) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    i64::from_be_bytes(a)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let fetch_offset = i64_at(data);
    let n = usize::from(data[8]) % 16;
    let Some(list) = data.get(9..9 + 16 * n) else {
        return;
    };
    let aborted: Vec<AbortedTransaction> = list
        .chunks_exact(16)
        .map(|c| AbortedTransaction {
            producer_id: i64_at(c),
            first_offset: i64_at(&c[8..]),
        })
        .collect();
    let mut buf = data[9 + 16 * n..].to_vec();
    fix_crcs(&mut buf);
    let Ok(decoded) = decode_batches(&Bytes::from(buf), &DecodeOptions::default()) else {
        return;
    };
    let batches = decoded.batches;
    let data_records: HashSet<Record> = batches
        .iter()
        .filter(|b| !b.header.is_control())
        .flat_map(|b| b.records.iter().cloned())
        .collect();
    let expected_next = batches.iter().map(|b| b.header.next_offset()).max();

    let committed = deliverable(
        batches.clone(),
        fetch_offset,
        IsolationLevel::ReadCommitted,
        &aborted,
    );
    let uncommitted = deliverable(
        batches,
        fetch_offset,
        IsolationLevel::ReadUncommitted,
        &aborted,
    );
    assert_eq!(committed.next_offset, expected_next);
    assert_eq!(uncommitted.next_offset, expected_next);
    for out in [&committed, &uncommitted] {
        for r in &out.records {
            assert!(r.offset >= fetch_offset, "record below the fetch offset");
            assert!(data_records.contains(r), "control record delivered");
        }
    }
    // read_committed only ever hides records.
    let mut all = uncommitted.records.iter();
    for r in &committed.records {
        assert!(
            all.any(|u| u == r),
            "read_committed delivered what read_uncommitted did not"
        );
    }
});
