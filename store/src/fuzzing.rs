//! Entry points for fuzzing what the store reads back from disk (`fuzz/`
//! at the repository root); not part of the supported API.

use std::path::Path;

use crate::error::{Result, StoreError};
use crate::meta::{self, META_KEYSPACE};
use crate::run_merge::{Segment, merge_segments};

/// The name of the metadata keyspace inside a task's fjall database.
pub const META_KEYSPACE_NAME: &str = META_KEYSPACE;

/// Decodes one metadata entry as [`TaskStore::open`](crate::TaskStore::open)
/// does when it reads the metadata keyspace back.
///
/// # Errors
/// [`StoreError::Corrupt`] for an entry no store writes.
pub fn decode_meta_entry(key: &[u8], value: &[u8]) -> Result<()> {
    meta::decode_entry(Path::new("<fuzz>"), key, value).map(drop)
}

/// Writes each of `runs` to a spill file under `dir` and merges them as a
/// bulk restore's final merge does (oldest first), also merging the same
/// bytes from memory; returns the records each merge emitted.
///
/// # Errors
/// [`StoreError::Corrupt`] for a run that is not a sequence of whole
/// records, or I/O errors.
pub fn merge_spill_files(dir: &Path, runs: &[&[u8]], drop_tombstones: bool) -> Result<(u64, u64)> {
    let mut paths = Vec::with_capacity(runs.len());
    for (i, run) in runs.iter().enumerate() {
        let path = dir.join(format!("run-{i}"));
        std::fs::write(&path, run).map_err(|e| StoreError::io(&path, e))?;
        paths.push(path);
    }
    let files: Vec<Segment<'_>> = paths
        .iter()
        .zip(runs)
        .map(|(path, run)| Segment::File {
            path,
            start: 0,
            len: run.len() as u64,
        })
        .collect();
    let memory: Vec<Segment<'_>> = runs.iter().map(|r| Segment::Memory(r)).collect();
    let from_files = merge_segments(&files, drop_tombstones, |_, _| Ok(()))?;
    let from_memory = merge_segments(&memory, drop_tombstones, |_, _| Ok(()))?;
    Ok((from_files, from_memory))
}
