//! Record batch v2 encode and decode throughput per codec.
//!
//! One batch of 1,000 records with 8-byte keys and 100-byte values that look
//! like small JSON events (compressible, but not trivially). Throughput is
//! counted in bytes of the *uncompressed* records section, so the figures of
//! different codecs compare the same payload.
//!
//! Run: `cargo bench -p weir-benches --bench protocol_codec`. Sample counts
//! are small so that the whole run takes about a minute on 2 cores.

// A bench whose input fails to encode has nothing to measure: stop loudly.
#![allow(clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_protocol::records::{
    BatchBuilder, BatchHeader, BatchOptions, Compression, DecodeOptions, RecordInput,
    decode_batches,
};

const RECORDS: usize = 1_000;
const VALUE_LEN: usize = 100;

fn records() -> Vec<RecordInput> {
    let mut rng = StdRng::seed_from_u64(7);
    let events = ["click", "view", "purchase", "scroll", "login"];
    (0..RECORDS)
        .map(|i| {
            let event = events[rng.random_range(0..events.len())];
            let mut value = format!(
                "{{\"user\":{},\"event\":\"{event}\",\"ts\":{},\"amount\":{:.2},\"tag\":\"",
                rng.random_range(0..100_000u32),
                1_700_000_000_000u64 + i as u64 * 3,
                rng.random_range(0.0..1000.0f64),
            )
            .into_bytes();
            while value.len() < VALUE_LEN - 2 {
                value.push(b'a' + rng.random_range(0..26u8));
            }
            value.extend_from_slice(b"\"}");
            value.truncate(VALUE_LEN);
            RecordInput {
                timestamp: 1_700_000_000_000 + i as i64 * 3,
                key: Some(Bytes::from((i as u64).to_be_bytes().to_vec())),
                value: Some(Bytes::from(value)),
                headers: vec![],
            }
        })
        .collect()
}

fn encode(codec: Compression, records: &[RecordInput]) -> Bytes {
    let mut builder = BatchBuilder::new(BatchOptions {
        compression: codec,
        ..Default::default()
    });
    for r in records {
        builder.push(r.clone());
    }
    match builder.build() {
        Ok(bytes) => bytes,
        Err(e) => panic!("encoding a {} batch failed: {e}", codec.name()),
    }
}

fn codec_throughput(c: &mut Criterion) {
    let records = records();
    let payload = (encode(Compression::None, &records).len() - BatchHeader::LEN) as u64;

    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Bytes(payload));
    for codec in Compression::ALL {
        group.bench_function(codec.name(), |b| {
            b.iter(|| encode(codec, black_box(&records)))
        });
    }
    group.finish();

    let opts = DecodeOptions::default();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Bytes(payload));
    for codec in Compression::ALL {
        let batch = encode(codec, &records);
        eprintln!(
            "{}: {payload} payload bytes -> {} batch bytes ({:.2}x)",
            codec.name(),
            batch.len(),
            payload as f64 / batch.len() as f64
        );
        group.bench_function(codec.name(), |b| {
            b.iter(|| match decode_batches(black_box(&batch), &opts) {
                Ok(decoded) => decoded,
                Err(e) => panic!("decoding a {} batch failed: {e}", codec.name()),
            })
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = codec_throughput
}
criterion_main!(benches);
