//! What weir-store reads back from disk, decoded directly: metadata
//! keyspace entries (format marker, store registrations, changelog offsets,
//! stream times, restore markers) and restore spill files (sorted runs of
//! encoded records, merged from files and from memory). Corrupt bytes must
//! give a typed error, never a panic or an unbounded allocation.
//!
//! Input: byte 0 picks the decoder. For metadata, byte 1 is the key length
//! and the rest splits into key and value; for spill files, byte 1 is the
//! number of runs and the rest is cut into that many runs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_store::fuzzing::{decode_meta_entry, merge_spill_files};

fuzz_target!(|data: &[u8]| {
    let [op, n, rest @ ..] = data else {
        return;
    };
    if op & 1 == 0 {
        let cut = usize::from(*n).min(rest.len());
        let (key, value) = rest.split_at(cut);
        let _ = decode_meta_entry(key, value);
    } else {
        let runs = usize::from(*n % 4) + 1;
        let size = rest.len().div_ceil(runs).max(1);
        let runs: Vec<&[u8]> = rest.chunks(size).collect();
        let Ok(dir) = tempfile::tempdir() else { return };
        if let Ok((files, memory)) = merge_spill_files(dir.path(), &runs, op & 2 != 0) {
            assert_eq!(files, memory, "file and memory merges disagree");
        }
    }
});
