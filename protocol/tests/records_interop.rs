//! Interoperability of Weir's record batch codec with other implementations:
//! a batch written by a real Kafka broker, a batch built by hand from the
//! spec, and the `kafka-protocol` crate's encoder and decoder (used here
//! only as an independent reference) for every codec.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records as kp;
use proptest::prelude::*;
use weir_protocol::records::{
    BatchBuilder, BatchOptions, Compression, DecodeOptions, RecordHeader, RecordInput,
    TimestampType, decode_batches, split_batches,
};

/// A record batch as a Kafka broker returned it in a Fetch response, from the
/// `kafka-protocol` crate's `fetch_response.rs` test: one record `hello` ->
/// `world` at offset delta 1 of a batch whose last offset delta is 3 (a
/// compacted batch), timestamp delta 1000 ms.
const KAFKA_BATCH: [u8; 79] = [
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, // base offset
    0x0, 0x0, 0x0, 0x43, // batch length 67
    0x0, 0x0, 0x0, 0x0, // partition leader epoch
    0x2, // magic
    0x73, 0x6d, 0x29, 0x7b, // crc
    0x0, 0x0, // attributes
    0x0, 0x0, 0x0, 0x3, // last offset delta
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, // base timestamp
    0x0, 0x0, 0x1, 0x0, 0x0, 0x0, 0x0, 0x0, // max timestamp
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, // producer id
    0x0, 0x0, // producer epoch
    0x0, 0x0, 0x0, 0x0, // base sequence
    0x0, 0x0, 0x0, 0x1,  // record count
    0x22, // record length 17
    0x1,  // record attributes
    0xd0, 0xf, // timestamp delta 1000
    0x2, // offset delta 1
    0xa, b'h', b'e', b'l', b'l', b'o', // key
    0xa, b'w', b'o', b'r', b'l', b'd', // value
    0x0,  // no headers
];

#[test]
fn a_batch_written_by_kafka_decodes() {
    let bytes = Bytes::from_static(&KAFKA_BATCH);
    let decoded = decode_batches(&bytes, &DecodeOptions::default()).unwrap();
    assert!(!decoded.truncated_tail);
    let batch = &decoded.batches[0];
    assert_eq!(
        batch.header.next_offset(),
        4,
        "compaction kept the last offset delta"
    );
    assert_eq!(batch.header.max_timestamp, 1 << 40);
    let [record] = &batch.records[..] else {
        panic!("one record")
    };
    assert_eq!((record.offset, record.timestamp), (1, 1000));
    assert_eq!(record.key.as_deref(), Some(&b"hello"[..]));
    assert_eq!(record.value.as_deref(), Some(&b"world"[..]));
    assert!(record.headers.is_empty());
    assert_eq!(split_batches(&bytes).unwrap().len(), 1);
}

/// The full batch for two records, written field by field from the protocol
/// guide, must equal what `BatchBuilder` produces byte for byte.
#[test]
fn builder_output_matches_a_batch_built_by_hand_from_the_spec() {
    let mut records = BytesMut::new();
    // Record 0: ts delta 0, offset delta 0, key "a", value "xyz", no headers.
    records.put_slice(&[
        0x14, 0x00, 0x00, 0x00, 0x02, b'a', 0x06, b'x', b'y', b'z', 0x00,
    ]);
    // Record 1: ts delta -5, offset delta 1, null key, empty value,
    // one header "h" -> null.
    records.put_slice(&[0x12, 0x00, 0x09, 0x02, 0x01, 0x00, 0x02, 0x02, b'h', 0x01]);

    let mut expected = BytesMut::new();
    expected.put_i64(0); // base offset
    expected.put_i32(49 + records.len() as i32);
    expected.put_i32(-1); // leader epoch
    expected.put_i8(2);
    expected.put_u32(0); // crc placeholder
    expected.put_i16(0x10); // transactional
    expected.put_i32(1); // last offset delta
    expected.put_i64(1_000_000); // base timestamp: the first record's
    expected.put_i64(1_000_000); // max timestamp
    expected.put_i64(77); // producer id
    expected.put_i16(3); // producer epoch
    expected.put_i32(12); // base sequence
    expected.put_i32(2); // record count
    expected.put_slice(&records);
    let crc = crc32c::crc32c(&expected[21..]);
    expected[17..21].copy_from_slice(&crc.to_be_bytes());

    let mut b = BatchBuilder::new(BatchOptions {
        producer_id: 77,
        producer_epoch: 3,
        base_sequence: 12,
        transactional: true,
        ..Default::default()
    });
    b.push(RecordInput {
        timestamp: 1_000_000,
        key: Some(Bytes::from_static(b"a")),
        value: Some(Bytes::from_static(b"xyz")),
        headers: vec![],
    });
    b.push(RecordInput {
        timestamp: 999_995,
        key: None,
        value: Some(Bytes::new()),
        headers: vec![RecordHeader {
            key: "h".into(),
            value: None,
        }],
    });
    assert_eq!(b.build().unwrap(), expected.freeze());
}

fn kp_compression(c: Compression) -> kp::Compression {
    match c {
        Compression::None => kp::Compression::None,
        Compression::Gzip => kp::Compression::Gzip,
        Compression::Snappy => kp::Compression::Snappy,
        Compression::Lz4 => kp::Compression::Lz4,
        Compression::Zstd => kp::Compression::Zstd,
    }
}

/// Header keys are unique here: `kafka-protocol` keeps headers in a map.
fn records() -> impl Strategy<Value = Vec<RecordInput>> {
    let header = prop::option::of(prop::collection::vec(any::<u8>(), 0..8).prop_map(Bytes::from));
    let record = (
        1_600_000_000_000i64..1_700_000_000_000,
        prop::option::of(prop::collection::vec(any::<u8>(), 0..20).prop_map(Bytes::from)),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..200).prop_map(Bytes::from)),
        prop::collection::btree_map("[a-z]{1,6}", header, 0..3),
    )
        .prop_map(|(timestamp, key, value, headers)| RecordInput {
            timestamp,
            key,
            value,
            headers: headers
                .into_iter()
                .map(|(key, value)| RecordHeader { key, value })
                .collect(),
        });
    prop::collection::vec(record, 1..20)
}

fn kp_record(r: &RecordInput, offset: i64, transactional: bool) -> kp::Record {
    let mut headers = kafka_protocol::indexmap::IndexMap::new();
    for h in &r.headers {
        headers.insert(StrBytes::from_string(h.key.clone()), h.value.clone());
    }
    kp::Record {
        transactional,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: 9,
        producer_epoch: 1,
        timestamp_type: kp::TimestampType::Creation,
        offset,
        // Sequence moves with the offset, so kafka-protocol keeps one batch.
        sequence: offset as i32,
        timestamp: r.timestamp,
        key: r.key.clone(),
        value: r.value.clone(),
        headers,
    }
}

fn assert_same_records(ours: &[weir_protocol::records::Record], theirs: &[kp::Record]) {
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(o.offset, t.offset);
        assert_eq!(o.timestamp, t.timestamp);
        assert_eq!(o.key, t.key);
        assert_eq!(o.value, t.value);
        let their_headers: Vec<(String, Option<Bytes>)> = t
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let our_headers: Vec<(String, Option<Bytes>)> = o
            .headers
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect();
        assert_eq!(our_headers, their_headers);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn kafka_protocol_decodes_what_weir_encodes(
        records in records(),
        codec in prop::sample::select(Compression::ALL.to_vec()),
        base_offset in 0i64..1 << 40,
    ) {
        let opts = BatchOptions {
            compression: codec,
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: base_offset as i32,
            base_offset,
            transactional: true,
            timestamp_type: TimestampType::CreateTime,
            ..Default::default()
        };
        let mut builder = BatchBuilder::new(opts);
        for r in &records {
            builder.push(r.clone());
        }
        let mut bytes = builder.build().unwrap();
        let mut sets = kp::RecordBatchDecoder::decode_all(&mut bytes).unwrap();
        prop_assert_eq!(sets.len(), 1);
        let set = sets.remove(0);
        prop_assert_eq!(set.compression, kp_compression(codec));
        let expected: Vec<kp::Record> =
            records.iter().enumerate().map(|(i, r)| kp_record(r, base_offset + i as i64, true)).collect();
        prop_assert_eq!(set.records, expected);
    }

    #[test]
    fn weir_decodes_what_kafka_protocol_encodes(
        records in records(),
        codec in prop::sample::select(Compression::ALL.to_vec()),
    ) {
        let theirs: Vec<kp::Record> =
            records.iter().enumerate().map(|(i, r)| kp_record(r, 100 + i as i64, false)).collect();
        let mut buf = BytesMut::new();
        kp::RecordBatchEncoder::encode(
            &mut buf,
            &theirs,
            &kp::RecordEncodeOptions { version: 2, compression: kp_compression(codec) },
        )
        .unwrap();
        let bytes = buf.freeze();
        let decoded = decode_batches(&bytes, &DecodeOptions::default()).unwrap();
        prop_assert!(!decoded.truncated_tail);
        prop_assert_eq!(decoded.batches.len(), 1, "kafka-protocol wrote one batch");
        let batch = &decoded.batches[0];
        prop_assert_eq!(batch.header.compression().unwrap(), codec);
        prop_assert_eq!((batch.header.producer_id, batch.header.base_sequence), (9, 100));
        assert_same_records(&batch.records, &theirs);
    }
}
