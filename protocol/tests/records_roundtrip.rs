//! Round trips through Weir's own record batch v2 encoder and decoder:
//! random records, headers, null keys and values, timestamps and all five
//! codecs. One encode must give exactly one batch, and whatever went in must
//! come out.

// clippy allows unwrap in #[test] functions only; the helpers here are test code too.
#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use weir_protocol::records::{
    BatchBuilder, BatchHeader, BatchOptions, Compression, DecodeOptions, RecordHeader, RecordInput,
    TimestampType, decode_batch, decode_batches, set_base_offset, set_partition_leader_epoch,
    split_batches,
};

fn compression() -> impl Strategy<Value = Compression> {
    prop::sample::select(Compression::ALL.to_vec())
}

fn nullable_bytes(max: usize) -> impl Strategy<Value = Option<Bytes>> {
    prop::option::weighted(
        0.8,
        prop::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from),
    )
}

fn record_header() -> impl Strategy<Value = RecordHeader> {
    ("[a-zA-Z0-9._\u{e9}\u{4e2d}-]{0,12}", nullable_bytes(16))
        .prop_map(|(key, value)| RecordHeader { key, value })
}

fn record(timestamps: BoxedStrategy<i64>) -> impl Strategy<Value = RecordInput> {
    (
        timestamps,
        nullable_bytes(64),
        nullable_bytes(300),
        prop::collection::vec(record_header(), 0..4),
    )
        .prop_map(|(timestamp, key, value, headers)| RecordInput {
            timestamp,
            key,
            value,
            headers,
        })
}

fn timestamps() -> BoxedStrategy<i64> {
    prop_oneof![
        3 => 1_600_000_000_000i64..1_800_000_000_000,
        1 => Just(-1i64),
        1 => any::<i64>(),
    ]
    .boxed()
}

fn options() -> impl Strategy<Value = BatchOptions> {
    (
        compression(),
        any::<bool>(),
        0i64..1 << 40,
        -1i32..100,
        any::<bool>(),
    )
        .prop_map(
            |(compression, transactional, base_offset, base_sequence, idempotent)| BatchOptions {
                compression,
                producer_id: if idempotent { 4242 } else { -1 },
                producer_epoch: if idempotent { 7 } else { -1 },
                base_sequence: if idempotent { base_sequence.max(0) } else { -1 },
                transactional,
                base_offset,
                partition_leader_epoch: -1,
                timestamp_type: TimestampType::CreateTime,
            },
        )
}

fn build(opts: BatchOptions, records: &[RecordInput]) -> Bytes {
    let mut builder = BatchBuilder::new(opts);
    for r in records {
        builder.push(r.clone());
    }
    assert_eq!(builder.len(), records.len());
    builder.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn one_encode_gives_one_batch_that_decodes_to_its_input(
        opts in options(),
        records in prop::collection::vec(record(timestamps()), 1..40),
    ) {
        let bytes = build(opts, &records);

        let decoded = decode_batches(&bytes, &DecodeOptions::default()).unwrap();
        prop_assert!(!decoded.truncated_tail);
        prop_assert_eq!(decoded.batches.len(), 1, "one encode, one batch");
        let split = split_batches(&bytes).unwrap();
        prop_assert_eq!(split.len(), 1);
        prop_assert_eq!(&split[0].1, &bytes);

        let batch = &decoded.batches[0];
        let h = &batch.header;
        prop_assert_eq!(h.total_len(), bytes.len());
        prop_assert_eq!(h.compression().unwrap(), opts.compression);
        prop_assert_eq!(h.is_transactional(), opts.transactional);
        prop_assert!(!h.is_control());
        prop_assert_eq!(h.record_count as usize, records.len());
        prop_assert_eq!(h.last_offset_delta as usize, records.len() - 1);
        prop_assert_eq!(h.next_offset(), opts.base_offset + records.len() as i64);
        prop_assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence),
            (opts.producer_id, opts.producer_epoch, opts.base_sequence));
        prop_assert_eq!(h.base_timestamp, records[0].timestamp);
        prop_assert_eq!(h.max_timestamp, records.iter().map(|r| r.timestamp).max().unwrap());

        prop_assert_eq!(batch.records.len(), records.len());
        for (i, (got, want)) in batch.records.iter().zip(&records).enumerate() {
            prop_assert_eq!(got.offset, opts.base_offset + i as i64);
            prop_assert_eq!(got.timestamp, want.timestamp);
            prop_assert_eq!(&got.key, &want.key);
            prop_assert_eq!(&got.value, &want.value);
            prop_assert_eq!(&got.headers, &want.headers);
        }
        prop_assert_eq!(&decode_batch(&bytes, &DecodeOptions::default()).unwrap(), batch);
    }

    #[test]
    fn broker_rewrites_keep_the_batch_valid(
        opts in options(),
        records in prop::collection::vec(record(timestamps()), 1..10),
        new_base in 0i64..1 << 50,
        epoch in any::<i32>(),
    ) {
        let original = build(opts, &records);
        let mut stored = BytesMut::from(&original[..]);
        set_base_offset(&mut stored, new_base);
        set_partition_leader_epoch(&mut stored, epoch);
        let stored = stored.freeze();

        let (header, _) = split_batches(&stored).unwrap().remove(0);
        prop_assert_eq!(header.base_offset, new_base);
        prop_assert_eq!(header.partition_leader_epoch, epoch);
        prop_assert_eq!(&stored[16..], &original[16..], "nothing after the epoch changes");
        let batch = decode_batch(&stored, &DecodeOptions::default()).unwrap();
        for (i, r) in batch.records.iter().enumerate() {
            prop_assert_eq!(r.offset, new_base + i as i64);
        }
    }

    #[test]
    fn uncompressed_estimate_is_exact_and_compressed_never_exceeds_it_by_much(
        opts in options(),
        records in prop::collection::vec(record(timestamps()), 1..20),
    ) {
        let mut builder = BatchBuilder::new(opts);
        for r in &records {
            builder.push(r.clone());
        }
        let estimate = builder.estimated_size();
        let bytes = builder.build().unwrap();
        if opts.compression == Compression::None {
            prop_assert_eq!(bytes.len(), estimate);
        } else {
            // Framing overhead of incompressible data is bounded.
            prop_assert!(bytes.len() <= estimate + estimate / 8 + 64, "{} > {}", bytes.len(), estimate);
        }
    }
}

#[test]
fn log_append_time_gives_every_record_the_batch_max_timestamp() {
    let opts = BatchOptions {
        timestamp_type: TimestampType::LogAppendTime,
        ..Default::default()
    };
    let mut builder = BatchBuilder::new(opts);
    for ts in [5, 50, 20] {
        builder.push(RecordInput {
            timestamp: ts,
            ..Default::default()
        });
    }
    let bytes = builder.build().unwrap();
    let batch = decode_batch(&bytes, &DecodeOptions::default()).unwrap();
    assert_eq!(batch.header.timestamp_type(), TimestampType::LogAppendTime);
    assert!(batch.records.iter().all(|r| r.timestamp == 50));
}

#[test]
fn uncompressed_keys_and_values_are_slices_of_the_input() {
    let mut builder = BatchBuilder::new(BatchOptions::default());
    builder.push(RecordInput {
        timestamp: 1,
        key: Some(Bytes::from_static(b"key")),
        value: Some(Bytes::from(vec![9u8; 1000])),
        headers: vec![RecordHeader {
            key: "h".into(),
            value: Some(Bytes::from_static(b"hv")),
        }],
    });
    let bytes = builder.build().unwrap();
    let decoded = decode_batches(&bytes, &DecodeOptions::default()).unwrap();
    let record = &decoded.batches[0].records[0];
    let range = bytes.as_ptr_range();
    for part in [
        record.key.as_ref().unwrap(),
        record.value.as_ref().unwrap(),
        record.headers[0].value.as_ref().unwrap(),
    ] {
        assert!(
            range.contains(&part.as_ptr()),
            "not a slice of the fetched buffer"
        );
    }
}

/// Every prefix of several concatenated batches decodes to the batches it
/// holds completely, with `truncated_tail` set exactly when it ends inside
/// one: what a Fetch response cut at `max_bytes` looks like.
#[test]
fn every_cut_of_concatenated_batches_reports_a_truncated_tail() {
    let mut all = BytesMut::new();
    let mut ends = Vec::new();
    for (i, codec) in Compression::ALL.into_iter().enumerate() {
        let opts = BatchOptions {
            compression: codec,
            base_offset: i as i64 * 3,
            ..Default::default()
        };
        let records: Vec<RecordInput> = (0..3)
            .map(|j| RecordInput {
                timestamp: 1000 + j,
                key: Some(Bytes::from(format!("k{i}-{j}"))),
                value: Some(Bytes::from(vec![j as u8; 40])),
                headers: vec![],
            })
            .collect();
        all.extend_from_slice(&build(opts, &records));
        ends.push(all.len());
    }
    let all = all.freeze();
    assert_eq!(split_batches(&all).unwrap().len(), 5);
    for cut in 0..=all.len() {
        let decoded = decode_batches(&all.slice(..cut), &DecodeOptions::default()).unwrap();
        let complete = ends.iter().filter(|&&end| end <= cut).count();
        assert_eq!(decoded.batches.len(), complete, "cut at {cut}");
        assert_eq!(
            decoded.truncated_tail,
            !(cut == 0 || ends.contains(&cut)),
            "cut at {cut}"
        );
        let offsets: Vec<i64> = decoded
            .batches
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.offset))
            .collect();
        assert_eq!(offsets, (0..complete as i64 * 3).collect::<Vec<_>>());
        // The broker side refuses a partial batch instead.
        if decoded.truncated_tail {
            assert!(split_batches(&all.slice(..cut)).is_err(), "cut at {cut}");
        }
    }
}

#[test]
fn header_len_is_61() {
    assert_eq!(BatchHeader::LEN, 61);
}
