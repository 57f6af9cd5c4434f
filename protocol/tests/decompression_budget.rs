//! The per-response decompression budget (review m13): the per-batch cap
//! alone lets a response of many small "bombs" exhaust memory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use weir_protocol::ProtocolError;
use weir_protocol::records::{
    BatchBuilder, BatchOptions, Compression, DecodeOptions, DecompressionBudget, RecordInput,
    decode_batches, decode_batches_within,
};

const BOMB: usize = 128 << 10;

/// `n` gzip batches of one record of `BOMB` zero bytes each: a few hundred
/// bytes on the wire, 128 KiB each decompressed.
fn bombs(n: usize, first_offset: i64) -> Bytes {
    let mut out = BytesMut::new();
    for i in 0..n {
        let mut builder = BatchBuilder::new(BatchOptions {
            compression: Compression::Gzip,
            base_offset: first_offset + i as i64,
            ..BatchOptions::default()
        });
        builder.push(RecordInput {
            timestamp: 0,
            key: None,
            value: Some(Bytes::from(vec![0u8; BOMB])),
            headers: vec![],
        });
        out.extend_from_slice(&builder.build().unwrap());
    }
    out.freeze()
}

#[test]
fn many_small_bombs_in_one_response_stop_at_the_budget_and_return_those_that_fit() {
    let buf = bombs(20, 0);
    assert!(buf.len() < 20 * 1024, "small on the wire: {}", buf.len());
    let opts = DecodeOptions::default();
    // Each bomb is far under the per-batch cap: without a budget all decode.
    assert_eq!(decode_batches(&buf, &opts).unwrap().batches.len(), 20);

    let mut budget = DecompressionBudget::new(1 << 20);
    let decoded = decode_batches_within(&buf, &opts, &mut budget).unwrap();
    // Eight bombs fit in 1 MiB (plus record framing, so seven): those are
    // returned, in order, and the eighth is left for the next fetch.
    assert_eq!(decoded.batches.len(), 7);
    assert_eq!(
        decoded.batches.last().map(|b| b.header.base_offset),
        Some(6)
    );
    assert!(decoded.budget_exhausted && !decoded.truncated_tail);
    assert!(budget.exhausted());
    // The eighth bomb's decompressed bytes were dropped, and not charged.
    assert_eq!(budget.used(), 7 * budget_per_bomb());
}

#[test]
fn a_single_batch_bigger_than_the_whole_budget_is_a_typed_error() {
    let opts = DecodeOptions::default();
    let mut budget = DecompressionBudget::new(budget_per_bomb() - 1);
    let err = decode_batches_within(&bombs(3, 5), &opts, &mut budget).unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::DecompressionBudgetExceeded {
                base_offset: 5,
                used: 0,
                ..
            }
        ),
        "{err}"
    );
}

/// The decompressed size of one bomb: the record with its framing.
fn budget_per_bomb() -> usize {
    let mut budget = DecompressionBudget::unlimited();
    decode_batches_within(&bombs(1, 0), &DecodeOptions::default(), &mut budget).unwrap();
    budget.used()
}

#[test]
fn the_budget_is_shared_by_every_partition_of_a_response() {
    let opts = DecodeOptions::default();
    let per = budget_per_bomb();
    let mut budget = DecompressionBudget::new(5 * per);
    // Two "partitions" of two bombs fit; the third one goes over.
    for p in 0..2 {
        let decoded = decode_batches_within(&bombs(2, 0), &opts, &mut budget).unwrap();
        assert_eq!(decoded.batches.len(), 2, "partition {p}");
    }
    assert_eq!(budget.used(), 4 * per);
    // The third holds one more bomb; the fourth partition gets nothing
    // decoded (and no decompression work), to be fetched again.
    let third = decode_batches_within(&bombs(2, 0), &opts, &mut budget).unwrap();
    assert_eq!((third.batches.len(), third.budget_exhausted), (1, true));
    assert_eq!(budget.used(), 5 * per);
    let fourth = decode_batches_within(&bombs(2, 0), &opts, &mut budget).unwrap();
    assert_eq!((fourth.batches.len(), fourth.budget_exhausted), (0, true));
    assert_eq!(budget.used(), 5 * per);
    // An uncompressed batch's data is a slice of the response itself: it
    // takes only its decoded records from the budget.
    let mut plain = BatchBuilder::new(BatchOptions::default());
    plain.push(RecordInput {
        timestamp: 0,
        key: None,
        value: Some(Bytes::from(vec![0u8; BOMB])),
        headers: vec![],
    });
    let one_record = std::mem::size_of::<weir_protocol::records::Record>();
    let mut small = DecompressionBudget::new(one_record);
    decode_batches_within(&plain.build().unwrap(), &opts, &mut small).unwrap();
    assert_eq!(small.used(), one_record);
}

/// One gzip batch of `n` minimal records (no key, no value, no headers):
/// 7 bytes each decompressed, a few bytes each on the wire.
fn minimal_records_bomb(n: usize) -> Bytes {
    let mut builder = BatchBuilder::new(BatchOptions {
        compression: Compression::Gzip,
        ..BatchOptions::default()
    });
    for _ in 0..n {
        builder.push(RecordInput {
            timestamp: 0,
            key: None,
            value: None,
            headers: vec![],
        });
    }
    builder.build().unwrap()
}

#[test]
fn decoded_records_are_charged_to_the_budget_not_only_decompressed_bytes() {
    // 200,000 minimal records decompress to about 1.6 MB but decode to
    // 20.8 MB of `Record`s: a 10 MiB budget must refuse the batch before
    // allocating them.
    let n = 200_000;
    let buf = minimal_records_bomb(n);
    let opts = DecodeOptions::default();
    let mut unlimited = DecompressionBudget::unlimited();
    let decoded = decode_batches_within(&buf, &opts, &mut unlimited).unwrap();
    assert_eq!(decoded.batches[0].records.len(), n);
    let record = std::mem::size_of::<weir_protocol::records::Record>();
    assert!(unlimited.used() >= n * record, "{}", unlimited.used());

    let mut budget = DecompressionBudget::new(10 << 20);
    let err = decode_batches_within(&buf, &opts, &mut budget).unwrap_err();
    assert!(
        matches!(err, ProtocolError::DecompressionBudgetExceeded { base_offset: 0, limit, .. } if limit == 10 << 20),
        "{err}"
    );
}
