//! Record batch v2 decoding with every codec, as the consumer (a Fetch
//! response's records) and the testkit (a Produce request's) decode them.
//! Byte 0 holds flags: bit 0 recomputes each batch's CRC-32C first, so that
//! mutated batches reach the decompressors and the record decoder instead of
//! stopping at the checksum; bit 1 skips CRC verification altogether. The
//! decompressed size is capped per batch and per call, so a compression bomb
//! must fail with a typed error, not exhaust memory.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_protocol::records::{
    DecodeOptions, DecompressionBudget, decode_batch, decode_batches, decode_batches_within,
    split_batches,
};

/// Rewrites the CRC of every batch whose length fits the buffer.
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

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if flags & 1 != 0 {
        fix_crcs(&mut buf);
    }
    let buf = Bytes::from(buf);
    let opts = DecodeOptions {
        verify_crc: flags & 2 == 0,
        max_decompressed_bytes: 1 << 20,
    };
    let mut budget = DecompressionBudget::new(2 << 20);
    let within = decode_batches_within(&buf, &opts, &mut budget);
    assert!(budget.used() <= budget.limit());
    let all = decode_batches(&buf, &opts);
    if let (Ok(a), Ok(b)) = (&within, &all) {
        // Within a budget: the same batches, or a prefix of them when the
        // budget ran out.
        if a.budget_exhausted {
            assert!(a.batches.len() < b.batches.len());
            assert_eq!(a.batches[..], b.batches[..a.batches.len()]);
        } else {
            assert_eq!(a, b);
        }
    }
    if let Ok(decoded) = &all {
        for batch in &decoded.batches {
            let h = batch.header;
            assert!(batch.records.len() <= h.record_count as usize);
            // Every record's offset lies inside its batch.
            for r in &batch.records {
                assert!(r.offset >= h.base_offset && r.offset <= h.last_offset());
            }
        }
    }
    // The broker side: whole batches, each decoded on its own.
    if let Ok(batches) = split_batches(&buf) {
        for (header, bytes) in batches {
            assert_eq!(header.total_len(), bytes.len());
            let _ = decode_batch(&bytes, &opts);
        }
    }
});
