//! Generations of a bulk restore written to temporary files, so that a store
//! larger than memory restores in bounded memory.
//!
//! A spill file holds one generation (see `partition`), bucket after bucket,
//! each bucket sorted: the file is one sorted run, and the offsets where its
//! buckets start let the final merge read one bucket of every file at a time.
//!
//! The files live in `<task dir>/restore-spill/<store>/`. They are never
//! fsynced: if the process dies, the restore is discarded anyway (its marker
//! says so), and `TaskStore::open` deletes the directory.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::partition::Generation;
use crate::run_merge::{Segment, merge_segments};
use crate::sorted_run::encode_record;

/// Sub-directory of a task directory that holds restore spill files.
pub(crate) const SPILL_DIR: &str = "restore-spill";

/// Files of one tier merged into one file of the next tier once this many
/// exist, which bounds the files (and read buffers) of the final merge while
/// writing each record only about log_128(generations) extra times.
const MAX_FAN_IN: usize = 128;

/// One spilled generation: a file of sorted buckets.
#[derive(Debug)]
pub(crate) struct SpilledGeneration {
    path: PathBuf,
    /// Where each bucket starts, and the file length last.
    offsets: Vec<u64>,
    records: u64,
}

impl SpilledGeneration {
    /// Bytes of `bucket` in the file.
    pub(crate) fn bucket_len(&self, bucket: usize) -> u64 {
        match (self.offsets.get(bucket), self.offsets.get(bucket + 1)) {
            (Some(start), Some(end)) => end.saturating_sub(*start),
            _ => 0,
        }
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the records of `bucket`, read from `file` (this generation's
    /// file), to `buf`; returns where they lie in it.
    pub(crate) fn read_bucket(
        &self,
        bucket: usize,
        file: &mut File,
        buf: &mut Vec<u8>,
    ) -> Result<Range<usize>> {
        let len = usize::try_from(self.bucket_len(bucket)).unwrap_or(usize::MAX);
        let start = self.offsets.get(bucket).copied().unwrap_or(0);
        let at = buf.len();
        buf.resize(at.saturating_add(len), 0);
        let out = buf.get_mut(at..).unwrap_or_default();
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(out))
            .map_err(|e| StoreError::io(&self.path, e))?;
        Ok(at..buf.len())
    }

    /// The sorted records of `bucket`, if it has any.
    pub(crate) fn segment(&self, bucket: usize) -> Option<Segment<'_>> {
        let len = self.bucket_len(bucket);
        (len > 0).then(|| Segment::File {
            path: &self.path,
            start: self.offsets.get(bucket).copied().unwrap_or(0),
            len,
        })
    }
}

/// The spilled generations of one restore, oldest first. Dropping it deletes
/// the files.
#[derive(Debug)]
pub(crate) struct Spill {
    dir: PathBuf,
    /// Each generation with its tier: 0 as spilled, n + 1 for a merge of tier n.
    generations: Vec<(SpilledGeneration, u8)>,
    next_id: u64,
}

impl Spill {
    /// Starts with an empty `dir`, removing what an earlier restore left.
    pub(crate) fn create(dir: PathBuf) -> Result<Self> {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&dir, e)),
        }
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(Self {
            dir,
            generations: Vec::new(),
            next_id: 0,
        })
    }

    /// The spilled generations, oldest first.
    pub(crate) fn generations(&self) -> Vec<&SpilledGeneration> {
        self.generations.iter().map(|(g, _)| g).collect()
    }

    /// Sorts every bucket of `generation` and writes them to a new file,
    /// merging tiers of files that are full. Returns the records written.
    pub(crate) fn push(&mut self, generation: &Generation) -> Result<u64> {
        // Nothing is older than the first generation, and the store was empty.
        let drop_tombstones = self.generations.is_empty();
        let path = self.next_path();
        let mut index = Vec::new();
        let spilled = write_file(path, generation.buckets(), |bucket, write| {
            generation.sort_bucket(bucket, drop_tombstones, &mut index, write)
        })?;
        let records = spilled.records;
        self.generations.push((spilled, 0));
        self.merge_full_tiers()?;
        Ok(records)
    }

    fn next_path(&mut self) -> PathBuf {
        self.next_id += 1;
        self.dir.join(format!("generation-{:06}", self.next_id))
    }

    fn merge_full_tiers(&mut self) -> Result<()> {
        loop {
            let Some(&(_, tier)) = self.generations.last() else {
                return Ok(());
            };
            let n = self
                .generations
                .iter()
                .rev()
                .take_while(|(_, t)| *t == tier)
                .count();
            if n < MAX_FAN_IN {
                return Ok(());
            }
            let start = self.generations.len() - n;
            let drop_tombstones = start == 0;
            let group: Vec<SpilledGeneration> =
                self.generations.drain(start..).map(|(g, _)| g).collect();
            let merged = self.merge_to_file(&group, drop_tombstones)?;
            for generation in &group {
                std::fs::remove_file(&generation.path)
                    .map_err(|e| StoreError::io(&generation.path, e))?;
            }
            tracing::debug!(dir = %self.dir.display(), files = n, tier, records = merged.records, "merged spilled generations");
            self.generations.push((merged, tier.saturating_add(1)));
        }
    }

    fn merge_to_file(
        &mut self,
        group: &[SpilledGeneration],
        drop_tombstones: bool,
    ) -> Result<SpilledGeneration> {
        let path = self.next_path();
        let buckets = group
            .first()
            .map_or(0, |g| g.offsets.len().saturating_sub(1));
        let mut record = Vec::new();
        write_file(path, buckets, |bucket, write| {
            let segments: Vec<Segment<'_>> =
                group.iter().filter_map(|g| g.segment(bucket)).collect();
            merge_segments(&segments, drop_tombstones, |key, value| {
                record.clear();
                encode_record(&mut record, key, value);
                write(&record)
            })
        })
    }
}

/// Writes a spill file at `path`, bucket after bucket: `bucket(b, write)`
/// hands bucket `b`'s records, encoded and in key order, to `write` and
/// returns how many it handed over.
fn write_file(
    path: PathBuf,
    buckets: usize,
    mut bucket: impl FnMut(usize, &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64>,
) -> Result<SpilledGeneration> {
    let io = |e| StoreError::io(&path, e);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&path).map_err(io)?);
    let mut offsets = Vec::with_capacity(buckets + 1);
    let mut offset = 0u64;
    let mut records = 0;
    for b in 0..buckets {
        offsets.push(offset);
        records += bucket(b, &mut |record: &[u8]| {
            offset += record.len() as u64;
            out.write_all(record).map_err(io)
        })?;
    }
    offsets.push(offset);
    out.flush().map_err(io)?;
    Ok(SpilledGeneration {
        path,
        offsets,
        records,
    })
}

impl Drop for Spill {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not delete restore spill files");
        }
    }
}
