//! Sorted runs of a bulk restore written to temporary files, so that a store
//! larger than memory restores in bounded memory.
//!
//! The files live in `<task dir>/restore-spill/<store>/`. They are never
//! fsynced: if the process dies, the restore is discarded anyway (its marker
//! says so), and `TaskStore::open` deletes the directory.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::run_merge::{KeyRange, RunBytes, RunSource, merge_runs};
use crate::sorted_run::{SAMPLE_EVERY, Sample, SortedRun, encode_record};

/// Sub-directory of a task directory that holds restore spill files.
pub(crate) const SPILL_DIR: &str = "restore-spill";

/// Runs of one tier merged into one file of the next tier once this many
/// exist, which bounds the files (and read buffers) of the final merge while
/// writing each record only about log_128(runs) extra times.
const MAX_FAN_IN: usize = 128;

/// The sorted runs of one restore, oldest first: the first ones in memory, up
/// to a budget, the rest spilled to files. Dropping it deletes the files.
#[derive(Debug)]
pub(crate) struct SpilledRuns {
    dir: PathBuf,
    /// Each run with its tier: 0 for a run as sorted, n + 1 for a merge of
    /// tier n; `None` for runs kept in memory.
    runs: Vec<(RunSource, Option<u8>)>,
    memory_budget: usize,
    memory_used: usize,
    next_id: u64,
}

impl SpilledRuns {
    /// Starts with an empty `dir`, removing what an earlier restore left.
    /// Runs are kept in memory while they fit in `memory_budget` bytes.
    pub(crate) fn create(dir: PathBuf, memory_budget: usize) -> Result<Self> {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&dir, e)),
        }
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(Self {
            dir,
            runs: Vec::new(),
            memory_budget,
            memory_used: 0,
            next_id: 0,
        })
    }

    /// Keeps a sorted run in memory if it fits the budget (and no run was
    /// spilled yet, so memory runs stay the oldest), else writes it to a new
    /// file, merging tiers of files that are full.
    pub(crate) fn push(&mut self, run: SortedRun) -> Result<()> {
        let spilled_any = self.runs.iter().any(|(_, tier)| tier.is_some());
        if !spilled_any && self.memory_used + run.bytes.len() <= self.memory_budget {
            self.memory_used += run.bytes.len();
            self.runs.push((memory_source(run), None));
            return Ok(());
        }
        let path = self.next_path();
        std::fs::write(&path, &run.bytes).map_err(|e| StoreError::io(&path, e))?;
        let source = RunSource {
            bytes: RunBytes::File {
                path,
                len: run.bytes.len() as u64,
            },
            samples: run.samples,
            records: run.records,
        };
        self.runs.push((source, Some(0)));
        self.merge_full_tiers()
    }

    /// The runs to merge, oldest first; valid while `self` lives.
    pub(crate) fn sources(&self) -> Vec<RunSource> {
        self.runs.iter().map(|(run, _)| run.clone()).collect()
    }

    fn next_path(&mut self) -> PathBuf {
        self.next_id += 1;
        self.dir.join(format!("run-{:06}", self.next_id))
    }

    fn merge_full_tiers(&mut self) -> Result<()> {
        loop {
            let Some(&(_, Some(tier))) = self.runs.last() else {
                return Ok(());
            };
            let n = self
                .runs
                .iter()
                .rev()
                .take_while(|(_, t)| *t == Some(tier))
                .count();
            if n < MAX_FAN_IN {
                return Ok(());
            }
            let start = self.runs.len() - n;
            // Nothing is older than the first run, and the store was empty.
            let drop_tombstones = start == 0;
            let group: Vec<RunSource> = self.runs.drain(start..).map(|(r, _)| r).collect();
            let merged = self.merge_to_file(&group, drop_tombstones)?;
            for run in &group {
                if let RunBytes::File { path, .. } = &run.bytes {
                    std::fs::remove_file(path).map_err(|e| StoreError::io(path, e))?;
                }
            }
            tracing::debug!(dir = %self.dir.display(), runs = n, tier, records = merged.records, "merged spilled runs");
            self.runs.push((merged, Some(tier.saturating_add(1))));
        }
    }

    fn merge_to_file(&mut self, group: &[RunSource], drop_tombstones: bool) -> Result<RunSource> {
        let path = self.next_path();
        let io = |e| StoreError::io(&path, e);
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&path).map_err(io)?);
        let mut record = Vec::new();
        let mut samples = Vec::new();
        let mut offset = 0u64;
        let mut written = 0usize;
        let records = merge_runs(
            group,
            &KeyRange::default(),
            drop_tombstones,
            |key, value| {
                record.clear();
                encode_record(&mut record, key, value);
                if written.is_multiple_of(SAMPLE_EVERY) {
                    samples.push(Sample {
                        key: key.to_vec(),
                        offset,
                    });
                }
                written += 1;
                out.write_all(&record).map_err(io)?;
                offset += record.len() as u64;
                Ok(())
            },
        )?;
        out.flush().map_err(io)?;
        Ok(RunSource {
            bytes: RunBytes::File { path, len: offset },
            samples,
            records,
        })
    }
}

impl Drop for SpilledRuns {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not delete restore spill files");
        }
    }
}

/// Wraps a run that joins the merge from memory.
pub(crate) fn memory_source(run: SortedRun) -> RunSource {
    RunSource {
        bytes: RunBytes::Memory(Arc::new(run.bytes)),
        samples: run.samples,
        records: run.records,
    }
}
